// A `mpirun -np N llama2 serve` job for the integration tests: started in its own process group,
// with its ranks found through /proc (Open MPI puts each rank in a process group of its own, so a
// signal to mpirun's group does not reach them), and cleaned up whatever happened to it.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client.h"

namespace llama2_test {

// The value of the Prometheus sample `name` (the whole name, labels included) in `text`; -1 when
// it is missing.
inline double metric_sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, name.size() + 1, name + " ") == 0)
      return std::stod(line.substr(name.size()));
  }
  return -1;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// utime + stime of a process in clock ticks (field 14 and 15 of /proc/PID/stat); -1 when gone.
inline long long cpu_ticks(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string field;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  return utime + stime;
}

class ServerJob {
 public:
  // mpirun.sh NP llama2 serve --model MODEL --socket DIR/NAME.sock --quiet --backend BACKEND
  // EXTRA..., with `env` (NAME=VALUE) added to its environment; stdout and stderr go to
  // DIR/NAME.log.
  ServerJob(const std::string& mpirun, const std::string& llama2, const std::string& dir,
            const std::string& name, int np, const std::string& model,
            const std::vector<std::string>& extra, const std::vector<std::string>& env = {},
            const std::string& backend = "cpu")
      : socket(dir + "/" + name + ".sock"), log(dir + "/" + name + ".log") {
    std::vector<std::string> args = {mpirun, std::to_string(np), llama2, "serve",   "--model",
                                     model,  "--socket",         socket, "--quiet", "--backend",
                                     backend};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const std::string& kv : env) putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ServerJob(const ServerJob&) = delete;
  ServerJob& operator=(const ServerJob&) = delete;

  // Waits until the socket accepts connections (MPI start-up and model load); false after
  // `seconds` or when the job ended first.
  bool wait_up(int seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (std::chrono::steady_clock::now() < until) {
      try {
        llama2::Client::connect(socket, 100);
        return true;
      } catch (const std::exception&) {
        if (waitpid(pid_, &status_, WNOHANG) == pid_) {
          pid_ = -1;
          return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
    return false;
  }

  // The pid of world rank `rank` of this job (a llama2 process serving our socket with
  // OMPI_COMM_WORLD_RANK=rank in its environment); -1 if none.
  pid_t rank_pid(int rank) const {
    const std::string want = "OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0';
    for (pid_t pid : pids_with_socket()) {
      if (read_file("/proc/" + std::to_string(pid) + "/environ").find(want) != std::string::npos)
        return pid;
    }
    return -1;
  }

  // Waits up to `ms` for mpirun to end; its wait status, or -1 if it is still running.
  int wait_exit(int ms) {
    if (pid_ < 0) return status_;
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    do {
      if (waitpid(pid_, &status_, WNOHANG) == pid_) {
        pid_ = -1;
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } while (std::chrono::steady_clock::now() < until);
    return -1;
  }

  std::string log_text() const { return read_file(log); }

  // Kills whatever is left: the ranks first (mpirun cannot, once it is killed), then mpirun.
  ~ServerJob() {
    for (pid_t pid : pids_with_socket()) {
      kill(pid, SIGCONT);
      kill(pid, SIGKILL);
    }
    if (pid_ > 0) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    unlink(socket.c_str());
  }

  const std::string socket, log;

 private:
  // llama2 processes (not mpirun) whose command line names our socket.
  std::vector<pid_t> pids_with_socket() const {
    std::vector<pid_t> out;
    DIR* d = opendir("/proc");
    if (d == nullptr) return out;
    for (dirent* e; (e = readdir(d)) != nullptr;) {
      const pid_t pid = static_cast<pid_t>(std::atoi(e->d_name));
      if (pid <= 0) continue;
      const std::string cmd = read_file("/proc/" + std::to_string(pid) + "/cmdline");
      const std::string argv0 = cmd.substr(0, cmd.find('\0'));
      const bool is_llama2 = argv0.size() >= 6 && argv0.compare(argv0.size() - 6, 6, "llama2") == 0;
      if (is_llama2 && cmd.find(socket) != std::string::npos) out.push_back(pid);
    }
    closedir(d);
    return out;
  }

  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace llama2_test
