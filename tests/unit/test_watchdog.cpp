// The step watchdog's pieces without MPI: the overdue rule and its thread, the stall diagnosis
// from heartbeat snapshots, the LLAMA2_TEST_STALL parser, and the socket server answering
// deadlines and fail_all on its own while nobody on the engine side takes its commands (a real
// server on a real Unix socket, with the real tokenizer; the real client).
#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "client/client.h"
#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/serving/socket_server.h"
#include "coordinator/serving/watchdog.h"
#include "coordinator/text/tokenizer.h"
#include "rank/engine.h"
#include "rank/step_heartbeat.h"
#include "test_util.h"

using llama2::RankBeat;
using llama2::SyncPoint;
using nlohmann::json;
using std::chrono::milliseconds;

namespace {

constexpr int64_t kSec = 1000000000;

RankBeat beat(int pid, int64_t step, int64_t done, int64_t point, bool inside, SyncPoint kind,
              int64_t since_ns, char state = 'S') {
  RankBeat b;
  b.observable = true;
  b.pid = pid;
  b.step = step;
  b.step_done = done;
  b.point = point;
  b.inside = inside;
  b.kind = kind;
  b.since_ns = since_ns;
  b.run_state = state;
  return b;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_SUITE("watchdog") {
  TEST_CASE("a step is overdue only while it runs and only past the timeout") {
    llama2::StepClock c;
    c.step = 4;
    c.running = true;
    c.running_for = milliseconds(3001);
    CHECK(llama2::step_overdue(c, milliseconds(3000)));
    CHECK_FALSE(llama2::step_overdue(c, milliseconds(3001)));
    CHECK_FALSE(llama2::step_overdue(c, milliseconds(0)));  // 0: the watchdog is off
    c.running = false;
    CHECK_FALSE(llama2::step_overdue(c, milliseconds(10)));
  }

  TEST_CASE("the watchdog thread calls on_stall once, with the overdue clock") {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<llama2::StepClock> fired;
    int probes = 0;
    {
      llama2::StepWatchdog w(
          milliseconds(20),
          [&] {
            std::lock_guard<std::mutex> lock(mu);
            llama2::StepClock c;
            c.step = 7;
            c.running = true;
            c.running_for = milliseconds(++probes * 10);  // overdue from the third probe on
            return c;
          },
          [&](const llama2::StepClock& c) {
            std::lock_guard<std::mutex> lock(mu);
            fired.push_back(c);
            cv.notify_all();
          });
      std::unique_lock<std::mutex> lock(mu);
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return !fired.empty(); }));
    }  // the destructor joins: no further call can come
    REQUIRE(fired.size() == 1);
    CHECK(fired[0].step == 7);
    CHECK(fired[0].running_for > milliseconds(20));
    CHECK(probes == 3);
  }

  TEST_CASE("stall message names the step, its age and the timeout flag") {
    llama2::StepClock c;
    c.step = 42;
    c.running = true;
    c.running_for = milliseconds(3050);
    const std::string m = llama2::stall_message(c, milliseconds(3000), "rank 1 is stopped");
    CHECK(m == "step 42 stalled: it has run for 3.0 s (--step-timeout-ms 3000); rank 1 is stopped");
  }
}

TEST_SUITE("stall diagnosis") {
  const int64_t now = 100 * kSec;

  TEST_CASE("an exited rank: named by exited_ranks, overdue at once, unread /proc is not exited") {
    // Zombie (killed, not yet reaped), no /proc entry ('?'), running, unread (0: e.g. rank 0 out of
    // file descriptors), and a rank on another node.
    const std::vector<RankBeat> r = {beat(100, 5, 4, 11, true, SyncPoint::kAllReduce, now, 'R'),
                                     beat(101, 5, 4, 11, true, SyncPoint::kAllReduce, now, 'Z'),
                                     beat(102, 5, 4, 10, true, SyncPoint::kPlan, now, '?'),
                                     beat(103, 5, 4, 11, true, SyncPoint::kAllReduce, now, 0),
                                     RankBeat{}};
    CHECK(llama2::exited_ranks(r) == "rank 1 (pid 101), rank 2 (pid 102)");
    CHECK(llama2::exited_ranks({r[0], r[3], r[4]}).empty());
    llama2::StepClock c;
    c.step = 5;
    c.running = true;
    c.running_for = milliseconds(10);
    CHECK_FALSE(llama2::step_overdue(c, milliseconds(60000)));
    c.exited = llama2::exited_ranks(r);
    CHECK(llama2::step_overdue(c, milliseconds(60000)));
    CHECK_FALSE(llama2::step_overdue(c, milliseconds(0)));  // the watchdog is off
  }

  TEST_CASE("a worker stopped before taking its plan is named, with its process state") {
    // Rank 0 handed out step 5's plan (point 10) and waits in the first all-reduce (point 11);
    // rank 1 still waits at point 10 for the plan, and is stopped.
    const std::vector<RankBeat> r = {
        beat(100, 5, 4, 11, true, SyncPoint::kAllReduce, now - 3 * kSec),
        beat(101, 4, 4, 10, true, SyncPoint::kPlan, now - 4 * kSec, 'T')};
    const std::string d = llama2::describe_stall(r, now);
    CHECK(has(d, "rank 1 (pid 101) is stopped"));
    CHECK(has(d, "waits for the plan of step 5"));
    CHECK(has(d, "unchanged for 4.0 s"));
    CHECK(has(d, "rank 0 waits in an all-reduce of step 5"));
  }

  TEST_CASE("a rank behind on the points is named even when its process runs") {
    // Rank 0 computes step 9 (past its point 20); ranks 1 and 2 wait in the next all-reduce.
    const std::vector<RankBeat> r = {
        beat(100, 9, 8, 20, false, SyncPoint::kPlan, now - 5 * kSec, 'R'),
        beat(101, 9, 8, 21, true, SyncPoint::kAllReduce, now - 5 * kSec),
        beat(102, 9, 8, 21, true, SyncPoint::kAllReduce, now - 5 * kSec)};
    const std::string d = llama2::describe_stall(r, now);
    CHECK(has(d, "rank 0 (pid 100) computes step 9"));
    CHECK(has(d, "ranks 1, 2 wait in an all-reduce of step 9"));
    CHECK_FALSE(has(d, "rank 1 (pid"));
  }

  TEST_CASE("every rank in the same collective: none is behind on the host") {
    const std::vector<RankBeat> r = {beat(100, 3, 2, 7, true, SyncPoint::kGather, now - kSec),
                                     beat(101, 3, 2, 7, true, SyncPoint::kGather, now - kSec)};
    const std::string d = llama2::describe_stall(r, now);
    CHECK(has(d, "every observable rank waits in the logits gather of step 3"));
    CHECK(has(d, "none is behind on the host"));
  }

  TEST_CASE("one rank alone: its own computation; ranks of other nodes are listed") {
    const std::vector<RankBeat> one = {beat(100, 3, 2, 1, false, SyncPoint::kPlan, now - kSec)};
    CHECK(has(llama2::describe_stall(one, now), "rank 0 (pid 100) computes step 3"));
    CHECK(has(llama2::describe_stall(one, now), "its own computation"));
    std::vector<RankBeat> far = {beat(100, 3, 2, 1, false, SyncPoint::kPlan, now - kSec),
                                 RankBeat{}, RankBeat{}};
    CHECK(has(llama2::describe_stall(far, now), "ranks 1, 2 not observable from rank 0"));
  }

  TEST_CASE("a rank whose process is gone is named whatever its counters say") {
    const std::vector<RankBeat> r = {
        beat(100, 3, 2, 7, true, SyncPoint::kAllReduce, now - kSec),
        beat(101, 3, 2, 7, true, SyncPoint::kAllReduce, now - kSec, '?')};
    CHECK(has(llama2::describe_stall(r, now), "rank 1 (pid 101) has exited"));
  }
}

TEST_SUITE("stall hook") {
  TEST_CASE("LLAMA2_TEST_STALL values") {
    CHECK(llama2::parse_stall_hook(nullptr).step == 0);
    CHECK(llama2::parse_stall_hook("").step == 0);
    const llama2::StallHook a = llama2::parse_stall_hook("3");
    CHECK((a.step == 3 && a.rank == 0 && a.ms == 0));
    const llama2::StallHook b = llama2::parse_stall_hook("5:1:3000");
    CHECK((b.step == 5 && b.rank == 1 && b.ms == 3000));
    for (const char* bad :
         {"0", "x", "1:", ":1", "1::2", "1:2:3:4", "-1", "1:99999999999", "1.5", "2 "}) {
      CAPTURE(bad);
      try {
        llama2::parse_stall_hook(bad);
        FAIL("accepted");
      } catch (const llama2::Error& e) {
        CHECK(has(e.what(), "LLAMA2_TEST_STALL must be STEP[:RANK[:MS]]"));
        CHECK(has(e.what(), std::string("got \"") + bad + "\""));
      }
    }
  }
}

TEST_SUITE("socket deadlines") {
  // The engine side is played by the test: it takes commands (or not) and sends events.
  struct Fixture {
    llama2::test::TempDir dir;
    llama2::ModelConfig config =
        llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
    llama2::Tokenizer tok{LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model"};
    llama2::ConstraintCompiler constraints{tok};
    std::unique_ptr<llama2::Admission> admission;
    llama2::EngineInbox inbox;
    std::unique_ptr<llama2::SocketServer> server;
    Fixture() {
      llama2::AdmissionOptions a;
      a.limits.max_seq_len = 512;
      a.limits.kv_capacity_tokens = 4096;
      a.max_queue = 256;
      a.max_inflight_per_client = 16;
      admission = std::make_unique<llama2::Admission>(a);
      llama2::ServerOptions o;
      o.socket_path = dir.file("s.sock");
      server = std::make_unique<llama2::SocketServer>(
          o, inbox, *admission, tok, constraints, config, llama2::SamplingParams{},
          [this] {
            return json{{"event", "health"}, {"status", server->stalled() ? "stalled" : "ready"}};
          },
          [] { return std::string(); });
      server->start();
    }
    std::vector<llama2::EngineCommand> take(size_t n) {
      std::vector<llama2::EngineCommand> got;
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (got.size() < n && std::chrono::steady_clock::now() < until) {
        for (auto& c : inbox.take(milliseconds(50))) got.push_back(std::move(c));
      }
      return got;
    }
  };

  TEST_CASE("a deadline passes while the engine takes nothing: the I/O thread answers it") {
    Fixture f;
    auto client = llama2::Client::connect(f.dir.file("s.sock"), 2000);
    const auto t0 = std::chrono::steady_clock::now();
    const json done = client->generate(json{{"id", "d1"},
                                            {"prompt", "hi"},
                                            {"max_new_tokens", 4},
                                            {"timeout_ms", 100},
                                            {"stream", false},
                                            {"seed", 9}},
                                       20000);
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(done.value("event", "") == "done");
    CHECK(done.value("finish_reason", "") == "timeout");
    CHECK(done["usage"].value("completion_tokens", -1) == 0);
    CHECK(done.value("text", "?").empty());
    CHECK(done.value("seed", 0) == 9);
    CHECK(took >= milliseconds(100) + llama2::kDeadlineGrace);
    // The engine side then sees the generation and its expiry, with one ticket.
    const auto cmds = f.take(2);
    REQUIRE(cmds.size() == 2);
    CHECK(cmds[0].kind == llama2::EngineCommand::Kind::kGenerate);
    CHECK(cmds[1].kind == llama2::EngineCommand::Kind::kExpired);
    CHECK(cmds[0].ticket == cmds[1].ticket);
    // The id is free again; a late event of the expired generation must not reach its successor.
    std::mutex mu;
    std::condition_variable cv;
    std::vector<json> seen;
    llama2::GenerateEvents ev;
    ev.on_token = [&](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      seen.push_back(e);
      cv.notify_all();
    };
    ev.on_done = ev.on_token;
    client->generate_async(json{{"id", "d1"}, {"prompt", "again"}, {"max_new_tokens", 4}}, ev);
    const auto next = f.take(1);
    REQUIRE(next.size() == 1);
    CHECK(next[0].ticket != cmds[0].ticket);
    f.server->send(next[0].client,
                   json{{"event", "token"}, {"id", "d1"}, {"index", 0}, {"text", "old"}}, "d1",
                   cmds[0].ticket, false);
    f.server->send(next[0].client,
                   json{{"event", "token"}, {"id", "d1"}, {"index", 0}, {"text", "new"}}, "d1",
                   next[0].ticket, false);
    // The generation's own sink turns the engine's events into the protocol's.
    llama2::Finished done_event;
    done_event.finish_reason = llama2::FinishReason::kLength;
    next[0].sink->on_finished(done_event, {});
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return seen.size() == 2; }));
    CHECK(seen[0].value("text", "") == "new");
    CHECK(seen[1].value("event", "") == "done");
  }

  TEST_CASE("fail_all answers every generation in flight; health reports the stall") {
    Fixture f;
    auto a = llama2::Client::connect(f.dir.file("s.sock"), 2000);
    auto b = llama2::Client::connect(f.dir.file("s.sock"), 2000);
    std::mutex mu;
    std::condition_variable cv;
    std::vector<json> finals;
    llama2::GenerateEvents ev;
    ev.on_done = [&](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      finals.push_back(e);
      cv.notify_all();
    };
    ev.on_error = ev.on_done;
    a->generate_async(json{{"id", "x"}, {"prompt", "one"}, {"max_new_tokens", 4}}, ev);
    b->generate_async(json{{"id", "y"}, {"prompt", "two"}, {"max_new_tokens", 4}}, ev);
    REQUIRE(f.take(2).size() == 2);  // both reached the engine side, which never answers
    CHECK(a->health(5000).value("status", "") == "ready");
    f.server->fail_all(llama2::ErrorCode::kInternal, "step 3 stalled");
    {
      std::unique_lock<std::mutex> lock(mu);
      REQUIRE(cv.wait_for(lock, std::chrono::seconds(20), [&] { return finals.size() == 2; }));
    }
    for (const json& e : finals) {
      CHECK(e.value("event", "") == "error");
      CHECK(e.value("code", "") == "internal");
      CHECK(e.value("message", "") == "step 3 stalled");
    }
    CHECK(a->health(5000).value("status", "") == "stalled");
    // New connections are still accepted (for health); new generations are refused.
    auto c = llama2::Client::connect(f.dir.file("s.sock"), 2000);
    CHECK(c->health(5000).value("status", "") == "stalled");
    CHECK(c->generate(json{{"prompt", "late"}}, 5000).value("code", "") == "shutting_down");
  }
}
