// Looking at an HTTP connection's socket from its handler (cpp-httplib 0.11 does not give a
// handler its socket), so that a thread waiting for a non-streamed answer notices a client that
// hung up.
#pragma once

#include <string>

namespace llama2 {

// The descriptor of the accepted connection with this peer address and port and this local port,
// found by its 4-tuple; -1 if not found.
int connection_fd(const std::string& remote_addr, int remote_port, int local_port);
// False once the client has closed its side (or the connection broke); true for fd -1.
bool client_alive(int fd);

}  // namespace llama2
