// The HTTP front's look at a client's TCP connection while a thread waits for a non-streamed
// answer (http_front.cpp): cpp-httplib 0.11 does not tell a handler its socket.
#pragma once

#include <string>

namespace llama2 {

// The descriptor of the connection from remote_addr:remote_port to local_port (its 4-tuple, as
// the request reports it), or -1 if not found.
int connection_fd(const std::string& remote_addr, int remote_port, int local_port);
// False once the client has closed its side (or the connection broke); true for fd -1.
bool client_alive(int fd);

}  // namespace llama2
