// Prefix caching end to end: `llama2 serve` under mpirun -np 2 on the CPU backend, the same
// workload against a server with --prefix-caching on and one with off, and every greedy output
// must be bit-identical between the two:
//
//   llama2_prefix_cache_test LLAMA2_BINARY MODEL_DIR MPIRUN_SH serve
//
//   1. R1 = P + s1 runs alone (P: a 100-token prefix, 6 full 16-token blocks); its blocks stay
//      cached.
//   2. R2 = P + s2 (long, streamed) and, once R2 streams, R3 = P + s3 (streamed): both share P's
//      cached blocks. Once R3 streams, R2 is cancelled and R4 = Q + t (another prefix) takes the
//      blocks R2 gave back while R3 still decodes: a shared block freed by the cancel would be
//      overwritten by R4 and change R3's tokens.
//   3. Three more prefixes, two requests each (the server has 36 KV blocks; R2 and R3 alone need
//      32 without sharing, 26 with): cached blocks are evicted, least recently used first, and
//      the second request of each prefix still hits.
// The counters must move as expected: hits and queries in `stats` and `health` on the caching
// server (queries = every admitted prompt token, hits >= the two shares of step 2, evictions in
// step 3), all 0 with prefix caching off; no block in use at the end.
#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "case_main.h"
#include "server_job.h"

using llama2_test::case_env;
using llama2_test::check;
using llama2_test::metric_sample;
using llama2_test::ServerJob;
using nlohmann::json;

namespace {

std::vector<int> random_tokens(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  std::vector<int> v;
  for (int i = 0; i < n; ++i) v.push_back(3 + static_cast<int>(rng() % 500));  // tiny vocab: 512
  return v;
}

std::vector<int> concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

json greedy(const std::string& id, const std::vector<int>& prompt, int max_new, bool stream) {
  return json{{"id", id},         {"prompt_tokens", prompt}, {"max_new_tokens", max_new},
              {"temperature", 0}, {"ignore_eos", true},      {"stream", stream}};
}

// A streamed generation whose tokens are collected; waits for its first token or its end.
struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> tokens;
  json done;
  llama2::GenerateEvents events() {
    llama2::GenerateEvents ev;
    ev.on_token = [this](const json& t) {
      std::lock_guard<std::mutex> lock(mu);
      tokens.push_back(t.value("token_id", -1));
      cv.notify_all();
    };
    ev.on_done = [this](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      done = e;
      cv.notify_all();
    };
    ev.on_error = ev.on_done;
    return ev;
  }
  bool wait_first_token() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return !tokens.empty(); });
  }
  bool wait_done() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(60), [&] { return !done.is_null(); });
  }
};

struct Outcome {
  std::map<std::string, std::vector<int>> tokens;  // by request id
  double queries = -1, hits = -1, evictions = -1, hits_after_step2 = -1, evictions_after_step2 = -1;
  int64_t prompt_tokens = 0;  // admitted prompt tokens
  json health;
};

std::vector<int> ids_of(const json& done) {
  return done.contains("token_ids") ? done["token_ids"].get<std::vector<int>>()
                                    : std::vector<int>{};
}

Outcome run_workload(const std::string& name, const std::string& caching) {
  Outcome o;
  ServerJob job(
      case_env().mpirun, case_env().llama2, case_env().tmp, name, 2, case_env().model,
      {"--prefix-caching", caching, "--kv-cache-blocks", "36", "--block-size", "16",
       "--max-batch-size", "4", "--max-inflight-per-connection", "4", "--cpu-threads", "1"});
  if (!check(job.wait_up(120), name + ": server up")) return o;
  auto c = llama2::Client::connect(job.socket, 5000);
  const std::vector<int> P = random_tokens(1, 100), Q = random_tokens(2, 100);
  auto run = [&](const std::string& id, const std::vector<int>& prompt, int max_new) {
    const json d = c->generate(greedy(id, prompt, max_new, false), 60000);
    check(d.value("event", "") == "done", name + ": " + id + " done: " + d.dump().substr(0, 200));
    o.tokens[id] = ids_of(d);
    o.prompt_tokens += static_cast<int64_t>(prompt.size());
  };

  // 1.
  run("R1", concat(P, {7, 8, 9, 10, 11}), 8);
  // 2.
  Stream r2, r3;
  c->generate_async(greedy("R2", concat(P, {12, 13, 14, 15, 16}), 150, true), r2.events());
  check(r2.wait_first_token(), name + ": R2 streams");
  c->generate_async(greedy("R3", concat(P, {17, 18, 19, 20, 21}), 150, true), r3.events());
  check(r3.wait_first_token(), name + ": R3 streams");
  c->cancel("R2");
  run("R4", concat(Q, {22, 23, 24, 25, 26}), 8);
  check(r2.wait_done() && r2.done.value("finish_reason", "") == "cancelled",
        name + ": R2 cancelled");
  check(r3.wait_done() && r3.done.value("finish_reason", "") == "length", name + ": R3 done");
  {
    std::lock_guard<std::mutex> lock(r3.mu);
    o.tokens["R3"] = r3.tokens;
  }
  {
    std::lock_guard<std::mutex> lock(r2.mu);
    o.tokens["R2"] = r2.tokens;  // up to the cancel: compared on the common length
  }
  o.prompt_tokens += 2 * 105;
  std::string stats = c->stats(5000);
  o.hits_after_step2 = metric_sample(stats, "llama2_prefix_cache_hits_total");
  o.evictions_after_step2 = metric_sample(stats, "llama2_prefix_cache_evictions_total");
  // 3.
  for (const char* round : {"a", "b"}) {
    for (uint32_t family = 3; family <= 5; ++family) {
      const std::string id = "F" + std::to_string(family) + round;
      run(id, concat(random_tokens(family, 100), {30 + static_cast<int>(round[0]), 31}), 8);
    }
  }
  stats = c->stats(5000);
  o.queries = metric_sample(stats, "llama2_prefix_cache_queries_total");
  o.hits = metric_sample(stats, "llama2_prefix_cache_hits_total");
  o.evictions = metric_sample(stats, "llama2_prefix_cache_evictions_total");
  o.health = c->health(5000);
  if (case_env().failures > 0) {
    std::printf("---- %s stats ----\n%s\n---- log ----\n%s\n----\n", name.c_str(), stats.c_str(),
                job.log_text().c_str());
  }
  return o;
}

void case_serve() {
  const Outcome on = run_workload("on", "on");
  const Outcome off = run_workload("off", "off");
  if (case_env().failures > 0) return;
  for (const auto& [id, toks] : off.tokens) {
    const std::vector<int>& got = on.tokens.at(id);
    if (id == "R2") {
      const size_t n = std::min(got.size(), toks.size());
      check(n > 0 && std::equal(got.begin(), got.begin() + n, toks.begin()),
            "R2 (cancelled): its first " + std::to_string(n) + " tokens identical");
      continue;
    }
    check(!toks.empty() && got == toks, id +
                                            ": greedy tokens identical with and without prefix "
                                            "caching (" +
                                            std::to_string(toks.size()) + ")");
  }
  std::printf("on: queries %g hits %g (after step 2: %g) evictions %g (after step 2: %g)\n",
              on.queries, on.hits, on.hits_after_step2, on.evictions, on.evictions_after_step2);
  check(on.queries == static_cast<double>(on.prompt_tokens),
        "queries count every admitted prompt token (" + std::to_string(on.prompt_tokens) + ")");
  // R2 and R3 each find P's 6 full blocks (R1's, or each other's).
  check(on.hits_after_step2 >= 2 * 96, "R2 and R3 hit P's 96 cached tokens");
  check(on.evictions > on.evictions_after_step2 && on.evictions > 0,
        "step 3 evicts cached blocks under pressure");
  check(on.hits > on.hits_after_step2, "a prefix's second request in step 3 still hits");
  const json& hp = on.health.value("prefix_cache", json::object());
  check(hp.value("hit_tokens", -1.0) == on.hits && hp.value("queried_tokens", -1.0) == on.queries,
        "health reports the same counters as stats: " + on.health.dump());
  check(on.health.value("kv_blocks_cached", 0) > 0 && on.health.value("kv_blocks_used", -1) == 0,
        "caching server: cached blocks kept, none in use at the end");
  check(off.queries == 0 && off.hits == 0 && off.evictions == 0 &&
            off.health.value("kv_blocks_cached", -1) == 0,
        "--prefix-caching off: nothing looked up, cached or evicted");
}

}  // namespace

int main(int argc, char** argv) {
  return llama2_test::case_main(argc, argv, "llama2_prefix_cache_test", "llama2_prefix",
                                {{"serve", case_serve}});
}
