// The access log's cost (--access-log, src/coordinator/http/access_log.h), the two sides apart:
//  * a connection thread: filling one AccessRecord (the strings a request has) and handing it to
//    AccessLog::record() (a move into the bounded queue under a lock), from 1 and 8 threads at
//    once;
//  * the writer thread: format_access_line (text and json) per line, and the whole queue drained
//    and written to /dev/null.
// The engine thread never touches the log. What it costs at saturation follows from the request
// rate: one H200, 7B, HTTP saturation 13,821 tok/s of 128-token completions is ~108 requests/s
// (benchmarks/RESULTS.md), so each microsecond per request is ~0.01% of one core.
//
//   build/llama2_bench_access_log        (best of 5 runs per cell; 50k records, fewer than the
//                                         queue holds, so that none is dropped)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/http/access_log.h"

namespace {

using Clock = std::chrono::steady_clock;

llama2::AccessRecord record(int i) {
  llama2::AccessRecord r;
  r.time = std::chrono::system_clock::now();
  r.request_id = "0123456789abcdef" + std::to_string(1000000 + i);
  r.method = "POST";
  r.route = "/v1/chat/completions";
  r.status = 200;
  r.model = "Llama-2-7b-chat-hf";
  r.prompt_tokens = 128;
  r.completion_tokens = 128;
  r.cached_tokens = 64;
  r.ttft_s = 0.0151;
  r.total_s = 1.234;
  r.client = "10.1.2.3:54321";
  return r;
}

// ns per record() call from `threads` threads, and ns per line for the writer to drain the rest.
void producers(llama2::AccessLogFormat format, int threads, int n) {
  double best_put = 1e30, best_drain = 1e30;
  for (int run = 0; run < 5; ++run) {
    const int fd = ::open("/dev/null", O_WRONLY);
    Clock::time_point t0, t1, t2;
    uint64_t dropped = 0;
    {
      llama2::AccessLog log(format, fd);
      std::vector<std::thread> ts;
      t0 = Clock::now();
      for (int t = 0; t < threads; ++t) {
        ts.emplace_back([&log, n, threads, t] {
          for (int i = t; i < n; i += threads) log.record(record(i));
        });
      }
      for (auto& t : ts) t.join();
      t1 = Clock::now();
      dropped = log.dropped();
    }  // the destructor drains and writes what is queued
    t2 = Clock::now();
    ::close(fd);
    if (dropped != 0)
      std::printf("  (%llu lines dropped: the queue was full)\n",
                  static_cast<unsigned long long>(dropped));
    best_put = std::min(best_put, std::chrono::duration<double, std::nano>(t1 - t0).count() / n *
                                      threads);  // per call, per thread
    best_drain =
        std::min(best_drain, std::chrono::duration<double, std::nano>(t2 - t0).count() / n);
  }
  std::printf(
      "%-5s %d thread(s): record() %7.0f ns per call (per thread); all %d lines written "
      "after %7.0f ns per line\n",
      llama2::to_string(format), threads, best_put, n, best_drain);
}

void formatting(llama2::AccessLogFormat format, int n) {
  const llama2::AccessRecord r = record(7);
  double best = 1e30;
  size_t bytes = 0;
  for (int run = 0; run < 5; ++run) {
    const Clock::time_point t0 = Clock::now();
    for (int i = 0; i < n; ++i) bytes += llama2::format_access_line(r, format).size();
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / n);
  }
  std::printf("%-5s format_access_line: %6.0f ns per line (%zu bytes)\n", llama2::to_string(format),
              best, bytes / (5u * static_cast<size_t>(n)));
}

}  // namespace

int main() {
  const int n = 50000;  // < AccessLog::kMaxQueued: every line is written
  // The check before the timing: every record reaches the writer (none dropped).
  {
    const int fd = ::open("/dev/null", O_WRONLY);
    llama2::AccessLog log(llama2::AccessLogFormat::kJson, fd);
    for (int i = 0; i < 1000; ++i) log.record(record(i));
    if (log.dropped() != 0) {
      std::fprintf(stderr, "records dropped\n");
      return 1;
    }
    ::close(fd);
  }
  for (auto f : {llama2::AccessLogFormat::kText, llama2::AccessLogFormat::kJson}) formatting(f, n);
  for (auto f : {llama2::AccessLogFormat::kOff, llama2::AccessLogFormat::kJson})
    for (int threads : {1, 8}) producers(f, threads, n);
  return 0;
}
