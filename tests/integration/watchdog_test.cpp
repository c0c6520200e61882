// A stalled rank, a killed rank and an idle rank, end to end under mpirun (real sockets; the CPU
// backend in CI, BACKEND cuda on a GPU node: stall and kill need two GPUs there):
//
//   llama2_watchdog_test LLAMA2_BINARY MODEL_DIR MPIRUN_SH stall|kill|hook|idle [BACKEND]
//
// stall: rank 1 is SIGSTOPped while a generation streams (-np 2, --step-timeout-ms 3000). A request
//        sent then with timeout_ms 2000 must get done/timeout in < 5 s although the engine is
//        stuck; when the step watchdog fires, every client in flight gets an `internal` error
//        naming the step, `health` says "stalled", the job exits non-zero in bounded time with a
//        message that names the step and the stopped rank, and the socket file is gone.
// hook:  the same end at -np 1 through the LLAMA2_TEST_STALL hook (step 3 of rank 0 never ends):
//        the one-GPU scenario of the CUDA backend, run in CI on the CPU; on a GPU node
//        `llama2_watchdog_test build/llama2 tests/models/small-d128-f16 tests/integration/mpirun.sh
//        hook cuda` runs it on the CUDA backend.
// kill:  rank 1 is SIGKILLed while a generation streams (-np 2): see test_kill.
// idle:  an idle worker rank uses < 10% of a core over 2 s (it used ~45% busy-polling MPI_Bcast).
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "case_main.h"
#include "server_job.h"

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using llama2_test::case_env;
using llama2_test::check;
using llama2_test::ServerJob;

namespace {

double secs_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A string field of an event that may be missing (null when no event came).
std::string field(const json& event, const char* key) {
  return event.is_object() && event.contains(key) && event[key].is_string()
             ? event[key].get<std::string>()
             : std::string();
}

// The final event of an asynchronous generation, waited for with a bound.
struct Final {
  std::mutex mu;
  std::condition_variable cv;
  json event;
  bool set = false;
  Clock::time_point at;

  llama2::GenerateEvents events(std::function<void(const json&)> on_token = {}) {
    llama2::GenerateEvents ev;
    ev.on_token = std::move(on_token);
    ev.on_done = [this](const json& e) { store(e); };
    ev.on_error = ev.on_done;
    return ev;
  }
  void store(const json& e) {
    std::lock_guard<std::mutex> lock(mu);
    event = e;
    set = true;
    at = Clock::now();
    cv.notify_all();
  }
  bool wait(int seconds) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(seconds), [this] { return set; });
  }
};

// After a stall: the job must end by itself, non-zero, within `bound_s` of `since`, having said
// why in its log and removed its socket.
void check_job_end(ServerJob& job, Clock::time_point since, double bound_s,
                   const std::vector<std::string>& log_parts) {
  const int left_ms = static_cast<int>((bound_s - secs_since(since)) * 1000);
  const int st = job.wait_exit(std::max(left_ms, 0));
  const double took = secs_since(since);
  const std::string log = job.log_text();
  check(st != -1, "the job ended by itself " + std::to_string(took) + " s after the stall began");
  check(st != -1 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0),
        "mpirun exit status non-zero (wait status " + std::to_string(st) + ", exit code " +
            std::to_string(st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1) + ")");
  for (const std::string& part : log_parts)
    check(contains(log, part), "the log says \"" + part + "\"");
  check(access(job.socket.c_str(), F_OK) != 0, "socket file removed");
  if (case_env().failures > 0) std::printf("---- server log ----\n%s\n----\n", log.c_str());
}

// Streams a long generation (id A) on `client` into `final` and sends `sig` to `pid` at its first
// token, mid-generation. Returns when the signal was sent, or nothing if no token came in 10 s.
std::optional<Clock::time_point> signal_mid_stream(llama2::Client& client, Final& final, pid_t pid,
                                                   int sig) {
  auto sent = std::make_shared<std::promise<Clock::time_point>>();
  auto once = std::make_shared<std::once_flag>();
  client.generate_async(
      json{{"id", "A"}, {"prompt", "signal"}, {"max_new_tokens", 480}, {"ignore_eos", true}},
      final.events([sent, once, pid, sig](const json& t) {
        if (t.value("index", -1) != 0) return;
        std::call_once(*once, [&] {
          kill(pid, sig);
          sent->set_value(Clock::now());
        });
      }));
  std::future<Clock::time_point> at = sent->get_future();
  if (at.wait_for(std::chrono::seconds(10)) != std::future_status::ready) return std::nullopt;
  return at.get();
}

void test_stall() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "stall", 2, case_env().model,
                {"--step-timeout-ms", "3000", "--cpu-threads", "1", "--max-batch-size", "4"}, {},
                case_env().backend);
  if (!check(job.wait_up(60), "server up")) return;
  auto a = llama2::Client::connect(job.socket, 2000);
  auto b = llama2::Client::connect(job.socket, 2000);
  auto h = llama2::Client::connect(job.socket, 2000);
  check(field(h->health(2000), "status") == "ready", "health ready before the stall");
  const pid_t rank1 = job.rank_pid(1);
  if (!check(rank1 > 0, "rank 1 found (pid " + std::to_string(rank1) + ")")) return;

  // A streams a long generation; rank 1 is stopped at its first token, mid-generation.
  Final fa;
  const auto stopped_at = signal_mid_stream(*a, fa, rank1, SIGSTOP);
  if (!check(stopped_at.has_value(), "rank 1 stopped during a generation")) return;
  const Clock::time_point t_stop = *stopped_at;
  // C has no deadline of its own: only the watchdog can end it.
  Final fc;
  b->generate_async(json{{"id", "C"}, {"prompt", "no deadline"}, {"max_new_tokens", 8}},
                    fc.events());
  // B has timeout_ms 2000: the socket thread must answer it although the engine is stuck.
  const auto t_b = Clock::now();
  const json rb =
      b->generate(json{{"prompt", "deadline"}, {"max_new_tokens", 8}, {"timeout_ms", 2000}}, 8000);
  const double b_s = secs_since(t_b);
  std::printf("timeout_ms 2000 answered after %.3f s: %s\n", b_s, rb.dump().c_str());
  check(field(rb, "event") == "done" && field(rb, "finish_reason") == "timeout" && b_s < 5.0,
        "timeout_ms 2000 with rank 1 stopped -> done/timeout in " + std::to_string(b_s) +
            " s (< 5 s)");

  // The watchdog fires 3 s after the step began: C gets `internal`, health says stalled.
  const bool c_ended = fc.wait(15);
  check(c_ended, "the client without a deadline got a final event");
  if (c_ended) {
    std::printf("watchdog error %.3f s after SIGSTOP: %s\n",
                std::chrono::duration<double>(fc.at - t_stop).count(), fc.event.dump().c_str());
  }
  check(field(fc.event, "event") == "error" && field(fc.event, "code") == "internal" &&
            contains(field(fc.event, "message"), "step"),
        "in-flight client got an internal error naming the step");
  const json hs = h->health(2000);
  check(field(hs, "status") != "ready" && !field(hs, "status").empty(),
        "health not ready after the stall: " + hs.dump());
  check(fa.wait(5) && (field(fa.event, "event") == "done" || field(fa.event, "code") == "internal"),
        "the stopped stream ended with done or internal: " + fa.event.dump().substr(0, 200));
  check_job_end(job, t_stop, 20.0, {"stalled", "rank 1", "stopped"});
  std::printf("SIGSTOP to the end of the job: %.3f s\n", secs_since(t_stop));
}

// SIGKILL of rank 1 while a generation streams (-np 2: one tensor-parallel pair). Rank 0 is left
// in (or about to enter) a collective with a peer that is gone; before, mpirun killed it ~2 s
// later with the clients' connections cut and the socket file left behind. Now the watchdog sees
// the exited process at its next poll: the streaming client and one sent after the kill get an
// `internal` error naming the rank, and the job ends by itself, non-zero, within 5 s, its socket
// removed. BACKEND cuda runs it at TP 2 on a two-GPU node.
void test_kill() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "kill", 2, case_env().model,
                {"--step-timeout-ms", "3000", "--cpu-threads", "1", "--max-batch-size", "4"}, {},
                case_env().backend);
  if (!check(job.wait_up(120), "server up (TP 2, backend " + case_env().backend + ")")) return;
  auto a = llama2::Client::connect(job.socket, 2000);
  auto b = llama2::Client::connect(job.socket, 2000);
  const pid_t rank1 = job.rank_pid(1);
  if (!check(rank1 > 0, "rank 1 found (pid " + std::to_string(rank1) + ")")) return;
  Final fa;
  const auto killed_at = signal_mid_stream(*a, fa, rank1, SIGKILL);
  if (!check(killed_at.has_value(), "rank 1 killed during a generation")) return;
  const Clock::time_point t_kill = *killed_at;
  Final fb;
  b->generate_async(json{{"id", "B"}, {"prompt", "after the kill"}, {"max_new_tokens", 8}},
                    fb.events());
  const bool a_ended = fa.wait(15), b_ended = fb.wait(15);
  auto after_kill = [&](const Final& f) {
    return std::chrono::duration<double>(f.at - t_kill).count();
  };
  std::printf("stream, %.3f s after the kill: %s\nsent after it, %.3f s: %s\n", after_kill(fa),
              fa.event.dump().substr(0, 300).c_str(), after_kill(fb),
              fb.event.dump().substr(0, 300).c_str());
  check(a_ended, "the streaming client got a final event");
  check(b_ended, "the client sent after the kill got a final event");
  for (const Final* f : {&fa, &fb}) {
    check(field(f->event, "code") == "internal" &&
              contains(field(f->event, "message"),
                       "rank 1 (pid " + std::to_string(rank1) + ") exited"),
          "an internal error naming the exited rank: " + f->event.dump().substr(0, 200));
  }
  check_job_end(job, t_kill, 5.0, {"rank 1", "exited"});
  std::printf("SIGKILL to the end of the job: %.3f s\n", secs_since(t_kill));
}

void test_hook() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "hook", 1, case_env().model,
                {"--step-timeout-ms", "1500"}, {"LLAMA2_TEST_STALL=3"}, case_env().backend);
  if (!check(job.wait_up(120),
             "server up (TP 1, LLAMA2_TEST_STALL=3, backend " + case_env().backend + ")"))
    return;
  auto c = llama2::Client::connect(job.socket, 2000);
  const auto t0 = Clock::now();
  const json r = c->generate(json{{"prompt", "hook"}, {"max_new_tokens", 8}}, 10000);
  std::printf("stall hook: %.3f s: %s\n", secs_since(t0), r.dump().c_str());
  check(field(r, "code") == "internal" && contains(field(r, "message"), "step 3"),
        "step 3 stalls -> internal error naming step 3");
  check_job_end(job, t0, 15.0, {"LLAMA2_TEST_STALL", "step 3", "rank 0"});
  std::printf("request to the end of the job: %.3f s\n", secs_since(t0));
}

void test_idle() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "idle", 2, case_env().model,
                {"--cpu-threads", "1"});
  if (!check(job.wait_up(60), "server up")) return;
  auto c = llama2::Client::connect(job.socket, 2000);
  // One request, so the measurement covers the wait after a step as well as after start-up.
  check(
      field(c->generate(json{{"prompt", "idle"}, {"max_new_tokens", 4}}, 10000), "event") == "done",
      "one generation done");
  const pid_t rank0 = job.rank_pid(0), rank1 = job.rank_pid(1);
  if (!check(rank0 > 0 && rank1 > 0, "ranks found")) return;
  const long long t0_0 = llama2_test::cpu_ticks(rank0), t1_0 = llama2_test::cpu_ticks(rank1);
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the measured interval, not a sync
  const double wall = secs_since(t0), hz = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double cpu0 = (llama2_test::cpu_ticks(rank0) - t0_0) / hz / wall * 100;
  const double cpu1 = (llama2_test::cpu_ticks(rank1) - t1_0) / hz / wall * 100;
  std::printf("idle CPU over %.2f s: rank 0 %.1f%%, rank 1 %.1f%% of a core\n", wall, cpu0, cpu1);
  check(cpu1 < 10.0, "idle rank 1 uses " + std::to_string(cpu1) + "% of a core (< 10%)");
}

}  // namespace

int main(int argc, char** argv) {
  return llama2_test::case_main(
      argc, argv, "llama2_watchdog_test", "llama2_watchdog",
      {{"stall", test_stall}, {"kill", test_kill}, {"hook", test_hook}, {"idle", test_idle}},
      /*takes_backend=*/true);
}
