// The numbers `health` and `stats` report, end to end under mpirun -np 1 (CPU backend, real
// sockets), one case per run:
//
//   llama2_serve_counters_test LLAMA2_BINARY MODEL_DIR MPIRUN_SH queue_depth|rejected
//
// queue_depth  while the engine is inside a slow step (LLAMA2_TEST_STALL=3:0:MS holds step 3 for
//              MS ms) a second generation waits behind the one running (--max-batch-size 1):
//              `health`'s "queued" and `stats`' llama2_requests_waiting must both say 1, and both
//              0 once everything finished. They came from two owners (the socket thread's count
//              and the generator's queue, copied after each step) and disagreed.
// rejected     every refusal is counted in llama2_requests_rejected_total by its code: an invalid
//              request, a prompt too long and a full queue (--max-queue 0). The counter was
//              exported but never incremented.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <sstream>
#include <string>

#include "case_main.h"
#include "server_job.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using llama2_test::case_env;
using llama2_test::check;
using llama2_test::metric_sample;
using llama2_test::ServerJob;

namespace {

int queued(const json& health) {
  return health.is_object() && health.contains("queued") && health["queued"].is_number_integer()
             ? health["queued"].get<int>()
             : -1;
}

void case_queue_depth() {
  // Step 3 of the engine takes 4 s: long enough for the checks below, which need ~ms.
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "queue_depth", 1,
                case_env().model, {"--max-batch-size", "1", "--cpu-threads", "1"},
                {"LLAMA2_TEST_STALL=3:0:4000"});
  if (!check(job.wait_up(120), "server up")) return;
  auto a = llama2::Client::connect(job.socket, 2000);
  auto b = llama2::Client::connect(job.socket, 2000);

  // A's second token comes out of step 2: the engine is then about to enter (or in) step 3.
  std::mutex mu;
  std::condition_variable cv;
  bool second_token = false;
  json a_final;
  llama2::GenerateEvents ea;
  ea.on_token = [&](const json& t) {
    if (t.value("index", -1) != 1) return;
    std::lock_guard<std::mutex> lock(mu);
    second_token = true;
    cv.notify_all();
  };
  ea.on_done = [&](const json& e) {
    std::lock_guard<std::mutex> lock(mu);
    a_final = e;
    cv.notify_all();
  };
  ea.on_error = ea.on_done;
  a->generate_async(
      json{{"id", "A"}, {"prompt", "slow"}, {"max_new_tokens", 6}, {"ignore_eos", true}}, ea);
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!check(cv.wait_for(lock, std::chrono::seconds(20), [&] { return second_token; }),
               "A streamed two tokens"))
      return;
  }
  // B is handled by the socket thread before the health and stats frames sent after it on the
  // same connection: all three see B waiting while A's step 3 runs.
  json b_final;
  bool b_done = false;
  llama2::GenerateEvents eb;
  eb.on_done = [&](const json& e) {
    std::lock_guard<std::mutex> lock(mu);
    b_final = e;
    b_done = true;
    cv.notify_all();
  };
  eb.on_error = eb.on_done;
  b->generate_async(json{{"id", "B"}, {"prompt", "waits"}, {"max_new_tokens", 2}}, eb);
  const auto t0 = Clock::now();
  const json health = b->health(3000);
  const std::string stats = b->stats(3000);
  const double took = std::chrono::duration<double>(Clock::now() - t0).count();
  const double waiting = metric_sample(stats, "llama2_requests_waiting");
  std::printf(
      "during the slow step (%.3f s for health + stats): health queued %d, stats "
      "llama2_requests_waiting %g\n",
      took, queued(health), waiting);
  check(queued(health) == 1,
        "health: one generation queued (got " + std::to_string(queued(health)) + ")");
  check(waiting == queued(health), "stats reports the same queue depth as health");

  {
    std::unique_lock<std::mutex> lock(mu);
    check(cv.wait_for(lock, std::chrono::seconds(30), [&] { return b_done && !a_final.is_null(); }),
          "A and B finished");
  }
  check(b_final.value("event", "") == "done", "B done: " + b_final.dump());
  const json h2 = b->health(3000);
  const double w2 = metric_sample(b->stats(3000), "llama2_requests_waiting");
  check(queued(h2) == 0 && w2 == 0, "afterwards both report 0 queued (health " +
                                        std::to_string(queued(h2)) + ", stats " +
                                        std::to_string(w2) + ")");
  if (case_env().failures > 0)
    std::printf("---- server log ----\n%s\n----\n", job.log_text().c_str());
}

void case_rejected() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "rejected", 1,
                case_env().model,
                {"--max-queue", "0", "--max-seq-len", "64", "--cpu-threads", "1"});
  if (!check(job.wait_up(120), "server up")) return;
  auto c = llama2::Client::connect(job.socket, 2000);
  const json bad = c->generate(json{{"prompt", "x"}, {"temperature", -1}}, 5000);
  check(bad.value("code", "") == "invalid_request", "negative temperature -> invalid_request");
  const json long_prompt =
      c->generate(json{{"prompt_tokens", std::vector<int>(60, 5)}, {"max_new_tokens", 10}}, 5000);
  check(long_prompt.value("code", "") == "prompt_too_long", "60 + 10 tokens -> prompt_too_long");
  for (int i = 0; i < 2; ++i) {
    const json full = c->generate(json{{"prompt", "x"}, {"max_new_tokens", 1}}, 5000);
    check(full.value("code", "") == "queue_full", "--max-queue 0 -> queue_full");
  }
  const std::string stats = c->stats(3000);
  for (const auto& [code, want] : {std::pair<std::string, double>{"invalid_request", 1},
                                   {"prompt_too_long", 1},
                                   {"queue_full", 2}}) {
    const double got =
        metric_sample(stats, "llama2_requests_rejected_total{code=\"" + code + "\"}");
    check(got == want, "llama2_requests_rejected_total{code=\"" + code + "\"} is " +
                           std::to_string(got) + " (want " + std::to_string(want) + ")");
  }
  if (case_env().failures > 0) std::printf("---- stats ----\n%s\n----\n", stats.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return llama2_test::case_main(argc, argv, "llama2_serve_counters_test", "llama2_counters",
                                {{"queue_depth", case_queue_depth}, {"rejected", case_rejected}});
}
