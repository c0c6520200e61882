// Soak test of `llama2 serve` (issue 14): many short requests from concurrent clients, with the
// resources of every rank recorded after the first 1,000 requests and at the end, so that a leak
// per request (memory, file descriptors, device memory) shows as growth between the two records.
//
//   llama2_serve_soak LLAMA2_BINARY MODEL_DIR MPIRUN_SH [--requests N] [--clients C] [--np P]
//                     [--backend cpu|cuda] [--record FILE]
//
// Defaults: 10,000 requests, 16 clients, np 2, the CPU backend (CI). On the GPU node:
//   llama2_serve_soak build-gpu/llama2 DIR tests/integration/mpirun.sh --np 1 --backend cuda
// adds each rank's device memory (nvidia-smi's per-process figure) to the records.
//
// Bounds, checked between the record at 1,000 requests and the last one (the first 1,000 warm up
// allocator pools, the detokenizer cache and the kernel caches): resident memory of each rank
// grows by at most 16 MiB + 2% (a leak of even 2 KiB per request would exceed it at 10,000),
// descriptors by at most 2, device memory not at all. Every request must end with `done`.
#include <sys/types.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve_harness.h"

using namespace serve_harness;

namespace {

struct Sample {
  pid_t pid = -1;
  long rss_kb = -1;
  int fds = -1;
  long gpu_mib = -1;  // the process's device memory (GPU 0's total where nvidia-smi does not
                      // list the process); -1 on the CPU backend
};

long rss_kb(pid_t pid) {
  const std::string status = read_file("/proc/" + std::to_string(pid) + "/status");
  const size_t at = status.find("VmRSS:");
  return at == std::string::npos ? -1 : std::atol(status.c_str() + at + 6);
}

int fd_count(pid_t pid) {
  std::error_code ec;
  int n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++n;
  }
  return ec ? -1 : n;
}

// "pid, used_memory [MiB]" lines of every compute process, from nvidia-smi when it exists.
std::string gpu_processes(const std::string& dir) {
  const std::string out = dir + "/nvidia-smi.csv";
  const std::string cmd =
      "nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits > " + out +
      " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return "";
  return read_file(out);
}

long gpu_mib(const std::string& table, pid_t pid) {
  const std::string key = std::to_string(pid) + ",";
  for (size_t at = 0; (at = table.find(key, at)) != std::string::npos; ++at) {
    if (at == 0 || table[at - 1] == '\n') return std::atol(table.c_str() + at + key.size());
  }
  return -1;
}

// Memory used on the whole of GPU 0, for nodes whose nvidia-smi cannot see the processes of this
// container (then the per-process figure is missing and the device's total stands in for it: the
// node runs nothing else).
long gpu0_used_mib(const std::string& dir) {
  const std::string out = dir + "/nvidia-smi-used.csv";
  const std::string cmd =
      "nvidia-smi --id=0 --query-gpu=memory.used --format=csv,noheader,nounits > " + out +
      " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return -1;
  return std::atol(read_file(out).c_str());
}

std::vector<Sample> sample_ranks(const Server& server, const std::string& dir, bool cuda) {
  const std::string table = cuda ? gpu_processes(dir) : "";
  const long device_total = cuda ? gpu0_used_mib(dir) : -1;
  std::vector<Sample> out;
  for (pid_t pid : find_processes("llama2", server.socket, false)) {
    long mib = cuda ? gpu_mib(table, pid) : -1;
    if (cuda && mib < 0) mib = device_total;
    out.push_back(Sample{pid, rss_kb(pid), fd_count(pid), mib});
  }
  std::sort(out.begin(), out.end(), [](const Sample& a, const Sample& b) { return a.pid < b.pid; });
  return out;
}

std::string describe(const char* when, int done, double secs, const std::vector<Sample>& s) {
  std::string line;
  for (const Sample& x : s) {
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  "SOAK %s requests=%d elapsed_s=%.1f pid=%d rss_kb=%ld fds=%d gpu_mib=%ld\n", when,
                  done, secs, static_cast<int>(x.pid), x.rss_kb, x.fds, x.gpu_mib);
    line += buf;
  }
  return line;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: %s LLAMA2_BINARY MODEL_DIR MPIRUN_SH [--requests N] [--clients C] "
                 "[--np P] [--backend cpu|cuda] [--record FILE]\n",
                 argv[0]);
    return 2;
  }
  const std::string llama2 = argv[1], model = argv[2], mpirun = argv[3];
  int requests = 10000, clients = 16, np = 2;
  std::string backend = "cpu", record;
  for (int i = 4; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--requests") {
      requests = std::atoi(value.c_str());
    } else if (flag == "--clients") {
      clients = std::atoi(value.c_str());
    } else if (flag == "--np") {
      np = std::atoi(value.c_str());
    } else if (flag == "--backend") {
      backend = value;
    } else if (flag == "--record") {
      record = value;
    } else {
      std::fprintf(stderr,
                   "unknown flag %s (allowed: --requests --clients --np --backend --record)\n",
                   flag.c_str());
      return 2;
    }
  }
  const int warmup = std::min(1000, requests / 2);
  if (requests < 2 || clients < 1 || np < 1 || (backend != "cpu" && backend != "cuda")) {
    std::fprintf(stderr,
                 "bad values: --requests >= 2, --clients >= 1, --np >= 1, --backend cpu|cuda\n");
    return 2;
  }
  const std::string dir =
      std::filesystem::temp_directory_path() / ("llama2-soak-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const bool cuda = backend == "cuda";

  Server server(mpirun, llama2, model, dir, "soak", {"--max-batch-size", "16"}, np, backend);
  if (failures() > 0) return 1;

  const auto t0 = Clock::now();
  std::atomic<int> next{0}, completed{0}, errors{0};
  std::mutex mu;
  std::vector<Sample> at_warmup;
  std::string report;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::unique_ptr<llama2::Client> client;
      try {
        client = llama2::Client::connect(server.socket, 5000);
      } catch (const std::exception& e) {
        ++errors;
        std::lock_guard<std::mutex> lock(mu);
        if (first_error.empty()) first_error = e.what();
        return;
      }
      for (int i; (i = next++) < requests;) {
        // Half streamed, half not; distinct prompts so the detokenizer and tokenizer see variety.
        const json req = {
            {"prompt", "Soak request " + std::to_string(i) + " from client " + std::to_string(c)},
            {"max_new_tokens", 8},
            {"stream", i % 2 == 0}};
        const json ev = client->generate(req, 120000);
        if (ev.value("event", "") != "done") {
          ++errors;
          std::lock_guard<std::mutex> lock(mu);
          if (first_error.empty()) first_error = ev.dump();
        }
        if (++completed == warmup) {
          std::lock_guard<std::mutex> lock(mu);
          at_warmup = sample_ranks(server, dir, cuda);
          report += describe("warm", warmup, ms_since(t0) / 1000, at_warmup);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const double secs = ms_since(t0) / 1000;
  const std::vector<Sample> at_end = sample_ranks(server, dir, cuda);
  report += describe("end", completed.load(), secs, at_end);
  std::fputs(report.c_str(), stdout);
  if (!record.empty()) {
    if (FILE* f = std::fopen(record.c_str(), "w")) {
      std::fputs(report.c_str(), f);
      std::fclose(f);
    }
  }

  check(errors == 0 && completed == requests,
        std::to_string(completed.load()) + " requests, " + std::to_string(errors.load()) +
            " not done (first: " + first_error + ") in " + std::to_string(secs) + " s");
  check(at_warmup.size() == static_cast<size_t>(np) && at_end.size() == at_warmup.size(),
        "every rank sampled at " + std::to_string(warmup) + " requests and at the end");
  for (size_t r = 0; r < std::min(at_warmup.size(), at_end.size()); ++r) {
    const Sample &a = at_warmup[r], &b = at_end[r];
    const long rss_bound = 16 * 1024 + a.rss_kb / 50;
    check(a.rss_kb > 0 && b.rss_kb - a.rss_kb <= rss_bound,
          "pid " + std::to_string(b.pid) + " RSS " + std::to_string(a.rss_kb) + " -> " +
              std::to_string(b.rss_kb) + " KiB (bound +" + std::to_string(rss_bound) + ")");
    check(a.fds > 0 && b.fds - a.fds <= 2, "pid " + std::to_string(b.pid) + " fds " +
                                               std::to_string(a.fds) + " -> " +
                                               std::to_string(b.fds));
    if (cuda) {
      check(a.gpu_mib > 0 && b.gpu_mib == a.gpu_mib,
            "pid " + std::to_string(b.pid) + " device memory " + std::to_string(a.gpu_mib) +
                " -> " + std::to_string(b.gpu_mib) + " MiB");
    }
  }
  check(server.healthy(), "server still healthy after the soak");
  std::printf("%d passed, %d failed\n", passes(), failures());
  if (failures() == 0) std::filesystem::remove_all(dir);
  return failures() == 0 ? 0 : 1;
}
