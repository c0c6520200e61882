// Data parallelism end to end (issue 16): `mpirun -np N llama2 serve --tp T` on the CPU backend,
// real sockets, one case per run:
//
//   llama2_dp_serve_test LLAMA2_BINARY MODEL_DIR MPIRUN_SH
//   greedy_np2_tp1|greedy_np4_tp2|free|killed
//
// greedy_*  64 (np2) or 24 (np4) concurrent clients, one connection each, greedy prompts: every
//           output equals `llama2 generate` alone at -np 1 (same tokens, same text), token indices
//           are contiguous from 0, and `stats` shows every replica admitted some requests.
// free      two generations held on each replica (health shows both with KV blocks in use; every
//           step sleeps 20 ms through LLAMA2_TEST_STEP_DELAY_MS), then on each replica one
//           cancelled and one timed out (timeout_ms) or disconnected: every replica's
//           kv_blocks_used and running go back to 0.
// killed    under launch/llama2-mpirun, the leader of replica 1 (world rank 1 at -np 2 --tp 1) is
//           SIGKILLed with a stream in flight there: that client gets an `internal` error naming
//           the replica within the step timeout's bound, the socket file is removed and the job
//           exits non-zero, all within 30 s.
#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "case_main.h"
#include "server_job.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using llama2_test::case_env;
using llama2_test::check;
using llama2_test::metric_sample;
using llama2_test::ServerJob;

namespace {

const std::vector<std::string> kPrompts = {"The cat", "Once upon a time", "Hello", "A B C D"};
constexpr int kNewTokens = 12;

// `llama2 generate` alone at -np 1: {"text", "token_ids"} of a greedy run.
json generate_alone(const std::string& prompt) {
  const std::string out = case_env().tmp + "/alone.json";
  const std::string cmd = case_env().mpirun + " 1 " + case_env().llama2 +
                          " generate --backend cpu --quiet --json --temperature 0 --ignore-eos "
                          "--model " +
                          case_env().model + " -n " + std::to_string(kNewTokens) + " --prompt '" +
                          prompt + "' > " + out + " 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) return json();
  std::ifstream in(out);
  return json::parse(in, nullptr, false);
}

// The value of the Prometheus sample `name` (labels included); -1 when missing.
std::vector<std::string> job_args(int tp, std::vector<std::string> extra) {
  extra.insert(extra.begin(), {"--tp", std::to_string(tp), "--cpu-threads", "1"});
  return extra;
}

void case_greedy(int np, int tp, int clients, bool front = false) {
  std::map<std::string, json> alone;
  for (const std::string& p : kPrompts) alone[p] = generate_alone(p);
  ServerJob job(
      case_env().mpirun, case_env().llama2, case_env().tmp, "greedy", np, case_env().model,
      job_args(tp, front ? std::vector<std::string>{"--max-batch-size", "8", "--dedicated-front"}
                         : std::vector<std::string>{"--max-batch-size", "8"}));
  if (!check(job.wait_up(120), "server up")) return;
  struct Result {
    json done;
    std::vector<int> indices;
    std::string text;
  };
  std::vector<Result> results(static_cast<size_t>(clients));
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (int i = 0; i < clients; ++i) {
    threads.emplace_back([&, i] {
      Result& r = results[static_cast<size_t>(i)];
      try {
        auto c = llama2::Client::connect(job.socket, 5000);
        r.done = c->generate(json{{"prompt", kPrompts[static_cast<size_t>(i) % kPrompts.size()]},
                                  {"max_new_tokens", kNewTokens},
                                  {"temperature", 0},
                                  {"ignore_eos", true}},
                             120000, [&](const json& t) {
                               r.indices.push_back(t.value("index", -1));
                               r.text += t.value("text", "");
                             });
      } catch (const std::exception& e) {
        r.done = json{{"event", "exception"}, {"message", e.what()}};
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  int complete = 0, identical = 0, contiguous = 0;
  for (int i = 0; i < clients; ++i) {
    const Result& r = results[static_cast<size_t>(i)];
    const json& ref = alone[kPrompts[static_cast<size_t>(i) % kPrompts.size()]];
    if (r.done.value("event", "") == "done" && r.done.value("finish_reason", "") == "length")
      ++complete;
    else
      std::printf("client %d: %s\n", i, r.done.dump().c_str());
    bool in_order = r.indices.size() == static_cast<size_t>(kNewTokens);
    for (size_t k = 0; in_order && k < r.indices.size(); ++k)
      in_order = r.indices[k] == static_cast<int>(k);
    contiguous += in_order ? 1 : 0;
    if (ref.is_object() && r.text == ref.value("text", "")) ++identical;
  }
  std::printf("%d clients in %.1f s\n", clients, secs);
  check(complete == clients, std::to_string(complete) + "/" + std::to_string(clients) + " done");
  check(contiguous == clients,
        std::to_string(contiguous) + " clients got indices 0.." + std::to_string(kNewTokens - 1));
  check(identical == clients, std::to_string(identical) + " outputs equal generate alone at -np 1");
  auto c = llama2::Client::connect(job.socket, 5000);
  const std::string stats = c->stats(5000);
  const json health = c->health(5000);
  const int replicas = (front ? np - 1 : np) / tp;
  check(health.value("tp", 0) == tp && health["replicas"].size() == static_cast<size_t>(replicas),
        "health: tp " + std::to_string(tp) + ", " + std::to_string(replicas) + " replicas");
  double total = 0;
  for (int r = 0; r < replicas; ++r) {
    const double n = metric_sample(
        stats, "llama2_replica_requests_admitted_total{replica=\"" + std::to_string(r) + "\"}");
    total += n;
    check(n > 0, "replica " + std::to_string(r) + " admitted " + std::to_string(n));
  }
  check(total == clients, "admitted over all replicas = " + std::to_string(total));
}

// Polls health until every replica is idle with no KV blocks in use (or `seconds` pass).
bool replicas_freed(llama2::Client& c, int seconds, json* last) {
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  while (Clock::now() < until) {
    *last = c.health(5000);
    bool all = last->contains("replicas");
    for (const json& r : all ? (*last)["replicas"] : json::array())
      all = all && r.value("kv_blocks_used", -1) == 0 && r.value("running", -1) == 0;
    if (all) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

// Token counts and end events per request id, for a case that watches several streams at once.
struct StreamLog {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, json> ends;
  std::map<std::string, int> tokens;
  llama2::GenerateEvents events(const std::string& id) {
    llama2::GenerateEvents ev;
    ev.on_token = [this, id](const json&) {
      std::lock_guard<std::mutex> lock(mu);
      ++tokens[id];
      cv.notify_all();
    };
    ev.on_done = [this, id](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      ends[id] = e;
      cv.notify_all();
    };
    ev.on_error = ev.on_done;
    return ev;
  }
  // Waits up to `limit` for pred() (called under the lock); whether it held.
  template <typename Pred>
  bool wait(std::chrono::seconds limit, Pred pred) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, limit, pred);
  }
  // The end event of request `id` so far (null if none).
  json end(const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    const auto it = ends.find(id);
    return it == ends.end() ? json() : it->second;
  }
};

void case_free() {
  // Every step sleeps 20 ms (LLAMA2_TEST_STEP_DELAY_MS): a 300-token generation runs ~6 s, long
  // enough to be ended mid-way on the tiny model.
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "free", 2, case_env().model,
                job_args(1, {"--max-batch-size", "4"}), {"LLAMA2_TEST_STEP_DELAY_MS=20"});
  if (!check(job.wait_up(120), "server up")) return;
  StreamLog log;
  // One connection each, sent in this order: the dispatch rule (most free blocks, then the lowest
  // index) puts A and T on replica 0, B and D on replica 1.
  std::map<std::string, std::unique_ptr<llama2::Client>> conn;
  for (const char* id : {"A", "B", "T", "D"}) {
    conn[id] = llama2::Client::connect(job.socket, 5000);
    json req = {{"id", id}, {"prompt", "hold"}, {"max_new_tokens", 300}, {"ignore_eos", true}};
    if (std::string(id) == "T") req["timeout_ms"] = 1500;
    conn[id]->generate_async(req, log.events(id));
    log.wait(std::chrono::seconds(30), [&] { return log.tokens.count(id) > 0; });
  }
  auto probe = llama2::Client::connect(job.socket, 5000);
  const json busy = probe->health(5000);
  bool both = busy.contains("replicas") && busy["replicas"].size() == 2;
  for (const json& r : both ? busy["replicas"] : json::array())
    both = both && r.value("kv_blocks_used", 0) > 0 && r.value("running", 0) == 2;
  check(both, "both replicas hold 2 running requests with KV blocks: " + busy.dump());
  conn["A"]->cancel("A");
  conn["D"].reset();  // disconnect: D is cancelled on replica 1
  check(log.wait(std::chrono::seconds(20), [&] { return log.ends.count("T") > 0; }),
        "T ended by its timeout_ms");
  conn["B"]->cancel("B");
  log.wait(std::chrono::seconds(20), [&] { return log.ends.count("A") && log.ends.count("B"); });
  for (const auto& [id, reason] : {std::pair<const char*, const char*>{"A", "cancelled"},
                                   {"B", "cancelled"},
                                   {"T", "timeout"}}) {
    const json e = log.end(id);
    check(e.value("finish_reason", "") == reason, std::string(id) + ": " + e.dump());
  }
  json last;
  check(replicas_freed(*probe, 20, &last),
        "every replica back to 0 running, 0 KV blocks used: " + last.dump());
  // stats agree with health, per replica.
  const std::string stats = probe->stats(5000);
  check(metric_sample(stats, "llama2_replica_kv_blocks_used{replica=\"1\"}") == 0 &&
            metric_sample(stats, "llama2_replica_requests_admitted_total{replica=\"1\"}") == 2,
        "stats: replica 1 admitted 2, 0 KV blocks used");
}

void case_killed() {
  // Started through launch/llama2-mpirun (wrapper_np.sh next to mpirun.sh), as serve is run: when
  // a rank dies the wrapper gives the others 5 s, then ends the job (plain mpirun would sit out its
  // kill sequence). The front must answer its clients within that: 2 s step timeout + 1 s linger.
  const std::string wrapper =
      case_env().mpirun.substr(0, case_env().mpirun.rfind('/') + 1) + "wrapper_np.sh";
  ServerJob job(wrapper, case_env().llama2, case_env().tmp, "killed", 2, case_env().model,
                job_args(1, {"--step-timeout-ms", "2000"}), {"LLAMA2_TEST_STEP_DELAY_MS=20"});
  if (!check(job.wait_up(120), "server up")) return;
  auto c0 = llama2::Client::connect(job.socket, 5000);
  auto c1 = llama2::Client::connect(job.socket, 5000);
  StreamLog log;
  const json long_gen = {{"prompt", "doomed"}, {"max_new_tokens", 480}, {"ignore_eos", true}};
  json a = long_gen, b = long_gen;
  a["id"] = "R0";
  b["id"] = "R1";
  c0->generate_async(a, log.events("R0"));
  c1->generate_async(b, log.events("R1"));
  log.wait(std::chrono::seconds(60), [&] { return log.tokens.size() == 2; });
  const pid_t leader = job.rank_pid(1);
  if (!check(leader > 0, "found rank 1")) return;
  const auto t0 = Clock::now();
  kill(leader, SIGKILL);
  log.wait(std::chrono::seconds(20), [&] { return log.ends.count("R1") > 0; });
  const double err_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const json e1 = log.end("R1");
  check(e1.value("event", "") == "error" && err_s < 15,
        "the client on the killed replica got an error after " + std::to_string(err_s) +
            " s: " + e1.dump());
  const int status = job.wait_exit(30000);
  const double end_s = std::chrono::duration<double>(Clock::now() - t0).count();
  check(status != -1 && !(WIFEXITED(status) && WEXITSTATUS(status) == 0),
        "the job ended non-zero within 30 s (" + std::to_string(end_s) + " s, status " +
            std::to_string(status) + ")");
  struct stat st {};
  check(stat(job.socket.c_str(), &st) != 0, "socket file removed");
  check(e1.value("message", "").find("replica 1's leader (rank 1) has not reported") !=
            std::string::npos,
        "the error names the silent replica");
}

}  // namespace

int main(int argc, char** argv) {
  return llama2_test::case_main(argc, argv, "llama2_dp_serve_test", "llama2_dp",
                                {{"greedy_np2_tp1", [] { case_greedy(2, 1, 64); }},
                                 {"greedy_np4_tp2", [] { case_greedy(4, 2, 24); }},
                                 {"greedy_front_np3", [] { case_greedy(3, 1, 24, true); }},
                                 {"free", case_free},
                                 {"killed", case_killed}});
}
