#include "coordinator/http/connection_probe.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

namespace llama2 {

int connection_fd(const std::string& remote_addr, int remote_port, int local_port) {
  for (int fd = 3; fd < 65536; ++fd) {
    sockaddr_storage local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0) {
      if (errno == EBADF && fd > 4096) break;
      continue;
    }
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    char host[INET6_ADDRSTRLEN] = {};
    int lport = -1, pport = -1;
    if (peer.ss_family == AF_INET) {
      const auto* p = reinterpret_cast<const sockaddr_in*>(&peer);
      ::inet_ntop(AF_INET, &p->sin_addr, host, sizeof(host));
      pport = ntohs(p->sin_port);
      lport = ntohs(reinterpret_cast<const sockaddr_in*>(&local)->sin_port);
    } else if (peer.ss_family == AF_INET6) {
      const auto* p = reinterpret_cast<const sockaddr_in6*>(&peer);
      ::inet_ntop(AF_INET6, &p->sin6_addr, host, sizeof(host));
      pport = ntohs(p->sin6_port);
      lport = ntohs(reinterpret_cast<const sockaddr_in6*>(&local)->sin6_port);
    } else {
      continue;
    }
    if (pport == remote_port && lport == local_port && remote_addr == host) return fd;
  }
  return -1;
}

bool client_alive(int fd) {
  if (fd < 0) return true;
  pollfd p{fd, static_cast<short>(POLLIN | POLLRDHUP), 0};
  if (::poll(&p, 1, 0) <= 0) return true;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return false;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) != 0;
}

}  // namespace llama2
