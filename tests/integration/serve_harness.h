// Test harness for `llama2 serve` end-to-end tests: checks, a server job the tests wait for (on
// server_job.h), the processes of a job found through /proc, and raw socket connections that read
// frames with a hand-written decoder (so that a bug shared by the server and the client library's
// framing cannot hide).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "server_job.h"

namespace serve_harness {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

inline int& passes() {
  static int n = 0;
  return n;
}
inline int& failures() {
  static int n = 0;
  return n;
}

inline void check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  std::fflush(stdout);
  (ok ? passes() : failures())++;
}

inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

using llama2_test::read_file;

// 4-byte big-endian length + payload, written by hand.
inline std::string frame_of(const std::string& payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  return std::string{static_cast<char>(n >> 24), static_cast<char>(n >> 16),
                     static_cast<char>(n >> 8), static_cast<char>(n)} +
         payload;
}

// A client connection on a bare socket: writes arbitrary bytes, reads whole frames.
struct RawConn {
  int fd = -1;
  std::string buf;  // bytes read and not consumed yet

  explicit RawConn(const std::string& socket_path) {
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strncpy(a.sun_path, socket_path.c_str(), sizeof(a.sun_path) - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ~RawConn() {
    if (fd >= 0) ::close(fd);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return fd >= 0; }
  bool send_all(const std::string& bytes) {
    size_t off = 0;
    while (fd >= 0 && off < bytes.size()) {
      const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return fd >= 0;
  }
  enum class Got { kFrame, kClosed, kTimeout };
  // The next frame's payload within `timeout_ms`; kClosed when the server hung up first.
  Got read_frame(std::string* payload, int timeout_ms) {
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    for (;;) {
      if (buf.size() >= 4) {
        const auto* p = reinterpret_cast<const unsigned char*>(buf.data());
        const size_t n = (size_t{p[0]} << 24) | (size_t{p[1]} << 16) | (size_t{p[2]} << 8) | p[3];
        if (buf.size() >= 4 + n) {
          payload->assign(buf, 4, n);
          buf.erase(0, 4 + n);
          return Got::kFrame;
        }
      }
      const int left = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
      if (left <= 0) return Got::kTimeout;
      pollfd pfd{fd, POLLIN, 0};
      if (::poll(&pfd, 1, left) <= 0) continue;
      char tmp[65536];
      const ssize_t n = ::recv(fd, tmp, sizeof(tmp), 0);
      if (n <= 0) return Got::kClosed;
      buf.append(tmp, static_cast<size_t>(n));
    }
  }
};

// The pids of the processes whose command line contains `needle` and whose argv[0] ends with
// `argv0_suffix`; with `rank0_only`, only the one with OMPI_COMM_WORLD_RANK=0 in its environment.
inline std::vector<pid_t> find_processes(const std::string& argv0_suffix, const std::string& needle,
                                         bool rank0_only) {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  for (dirent* e; (e = readdir(d)) != nullptr;) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    const std::string dir = std::string("/proc/") + e->d_name;
    const std::string cs = read_file(dir + "/cmdline");
    const std::string argv0 = cs.substr(0, cs.find('\0'));
    const bool name_ok =
        argv0.size() >= argv0_suffix.size() &&
        argv0.compare(argv0.size() - argv0_suffix.size(), argv0_suffix.size(), argv0_suffix) == 0;
    if (!name_ok || cs.find(needle) == std::string::npos) continue;
    if (rank0_only &&
        read_file(dir + "/environ").find(std::string("OMPI_COMM_WORLD_RANK=0") + '\0') ==
            std::string::npos)
      continue;
    out.push_back(static_cast<pid_t>(std::stoi(e->d_name)));
  }
  closedir(d);
  return out;
}

// A server job (server_job.h: its own process group, every rank killed at the end) that the tests
// wait for: a server that does not come up is a failed check.
struct Server : llama2_test::ServerJob {
  Server(const std::string& mpirun, const std::string& llama2, const std::string& model,
         const std::string& dir, const std::string& name, const std::vector<std::string>& extra,
         int np = 2, const std::string& backend = "cpu")
      : ServerJob(mpirun, llama2, dir, name, np, model, extra, {}, backend) {
    if (!wait_up(60)) check(false, "server " + name + " did not come up; log: " + log);
  }
  pid_t rank0() const { return rank_pid(0); }
  // True while mpirun has not exited.
  bool running() { return wait_exit(0) == -1; }
  // A health answer on a fresh connection within `timeout_ms`: the server still serves.
  bool healthy(int timeout_ms = 5000) const {
    try {
      auto c = llama2::Client::connect(socket, timeout_ms);
      return c->health(timeout_ms).value("event", "") == "health";
    } catch (const std::exception&) {
      return false;
    }
  }
};

}  // namespace serve_harness
