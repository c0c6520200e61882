// The socket client (src/client/client.{h,cpp}) against a fake server in a thread: a real Unix
// socket in a temp dir speaking docs/PROTOCOL.md, scripted per test. Synchronisation is by the
// protocol itself and condition variables, never by sleeps; the only deadlines are generous
// upper bounds that turn a hang into a failure.
#include <doctest/doctest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "common/check.h"
#include "common/frame.h"
#include "test_util.h"

using llama2::Client;
using nlohmann::json;

namespace {

constexpr int kHangLimitMs = 20000;  // a bound that only a hang reaches

class FakeServer {
 public:
  enum class Mode {
    kPairs,           // answers generates two at a time, their events interleaved
    kCloseMidStream,  // sends one token for a generate, then closes the connection
    kSilent,          // never answers a generate; answers its cancel with done / cancelled
    kDeepEvent,       // answers a generate with a token event nested 200000 arrays deep
  };

  FakeServer(std::string path, Mode mode) : path_(std::move(path)), mode_(mode) {
    listen_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    REQUIRE(path_.size() < sizeof(addr.sun_path));
    std::memcpy(addr.sun_path, path_.data(), path_.size());
    REQUIRE(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(::listen(listen_fd_, 16) == 0);
    REQUIRE(::pipe(stop_pipe_) == 0);
    thread_ = std::thread([this] { run(); });
  }

  ~FakeServer() {
    const char b = 's';
    (void)!::write(stop_pipe_[1], &b, 1);
    thread_.join();
    ::close(listen_fd_);
    ::close(stop_pipe_[0]);
    ::close(stop_pipe_[1]);
  }

  // Waits until a request with this op (and id, when given) has arrived.
  bool wait_for(const std::string& op, const std::string& id = "") {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::milliseconds(kHangLimitMs), [&] {
      for (const json& r : received_) {
        if (r.value("op", "") == op && (id.empty() || r.value("id", "") == id)) return true;
      }
      return false;
    });
  }

  std::vector<json> received() {
    std::lock_guard<std::mutex> lock(mu_);
    return received_;
  }

 private:
  // Returns false when the stop pipe fired.
  bool wait_readable(int fd) {
    pollfd p[2] = {{fd, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    while (::poll(p, 2, -1) < 0) {
    }
    return !(p[1].revents & POLLIN);
  }

  void run() {
    while (wait_readable(listen_fd_)) {
      const int conn = ::accept(listen_fd_, nullptr, nullptr);
      if (conn < 0) continue;
      serve(conn);
      ::close(conn);
    }
  }

  static void send_event(int fd, const json& ev) { send_payload(fd, ev.dump()); }
  static void send_payload(int fd, const std::string& payload) {
    const std::string f = llama2::encode_frame(payload);
    size_t off = 0;
    while (off < f.size()) {
      const ssize_t n = ::send(fd, f.data() + off, f.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;  // the client went away; nothing to report to
      off += static_cast<size_t>(n);
    }
  }

  static json token(const std::string& id, int index) {
    return {{"event", "token"},
            {"id", id},
            {"index", index},
            {"token_id", 100 + index},
            {"text", "t" + std::to_string(index)}};
  }
  static json done(const std::string& id, const std::string& reason) {
    return {{"event", "done"},
            {"id", id},
            {"finish_reason", reason},
            {"usage", {{"prompt_tokens", 1}, {"completion_tokens", 2}}}};
  }

  // Serves one connection until the client closes it (or the script closes it).
  void serve(int fd) {
    llama2::FrameDecoder decoder;
    std::vector<std::string> waiting;  // kPairs: generates not answered yet
    char buf[4096];
    while (wait_readable(fd)) {
      const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) return;
      decoder.feed(buf, static_cast<size_t>(n));
      std::string payload, error;
      while (decoder.next(&payload, &error) == llama2::FrameDecoder::Status::kFrame) {
        const json req = json::parse(payload);
        {
          std::lock_guard<std::mutex> lock(mu_);
          received_.push_back(req);
        }
        cv_.notify_all();
        const std::string op = req.value("op", "");
        const std::string id = req.value("id", "");
        if (op == "health") {
          send_event(fd, {{"event", "health"}, {"status", "ready"}, {"ranks", 1}});
        } else if (op == "stats") {
          send_event(fd, {{"event", "stats"}, {"text", "llama2_requests_running 0\n"}});
        } else if (op == "generate" && mode_ == Mode::kPairs) {
          waiting.push_back(id);
          if (waiting.size() < 2) continue;
          const std::string a = waiting[0], b = waiting[1];
          waiting.clear();
          for (int i = 0; i < 2; ++i) {
            send_event(fd, token(a, i));
            send_event(fd, token(b, i));
          }
          send_event(fd, done(b, "length"));
          send_event(fd, done(a, "length"));
        } else if (op == "generate" && mode_ == Mode::kCloseMidStream) {
          send_event(fd, token(id, 0));
          return;  // the caller closes the connection: the "server killed" case
        } else if (op == "generate" && mode_ == Mode::kDeepEvent) {
          const size_t depth = 200000;  // ~400 KB: fits a frame, overflows a recursive copy
          send_payload(fd, R"({"event":"token","id":")" + id + R"(","text":)" +
                               std::string(depth, '[') + std::string(depth, ']') + "}");
        } else if (op == "cancel" && mode_ == Mode::kSilent) {
          send_event(fd, done(id, "cancelled"));
        }
      }
    }
  }

  const std::string path_;
  const Mode mode_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<json> received_;
};

struct Fixture {
  llama2::test::TempDir dir;
  std::string path = dir.file("s.sock");
};

}  // namespace

TEST_SUITE("client") {
  TEST_CASE("concurrent generates from 8 threads on one Client all complete with their ids") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kPairs);
    auto client = Client::connect(f.path, kHangLimitMs);
    // The server answers in pairs, so requests go in rounds of one per thread (8, even): a thread
    // that ran ahead with an odd request out would wait for a partner that never comes.
    constexpr int kThreads = 8, kPerThread = 4;
    llama2::test::Barrier round_barrier(kThreads);
    auto next_round = [&] { round_barrier.wait(); };
    struct Result {
      std::string id;
      json final_event;
      std::vector<json> tokens;
    };
    std::vector<std::vector<Result>> results(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          next_round();
          Result r;
          r.id = client->next_id();
          r.final_event = client->generate({{"id", r.id}, {"prompt", "hi"}}, kHangLimitMs,
                                           [&r](const json& ev) { r.tokens.push_back(ev); });
          results[t].push_back(std::move(r));
        }
      });
    }
    for (auto& th : threads) th.join();
    std::set<std::string> ids;
    for (const auto& per_thread : results) {
      REQUIRE(per_thread.size() == kPerThread);
      for (const Result& r : per_thread) {
        CAPTURE(r.final_event.dump());
        CHECK(r.final_event["event"] == "done");
        CHECK(r.final_event["id"] == r.id);
        REQUIRE(r.tokens.size() == 2);
        for (int i = 0; i < 2; ++i) {
          CHECK(r.tokens[i]["id"] == r.id);  // interleaved events reach the right request
          CHECK(r.tokens[i]["index"] == i);
        }
        ids.insert(r.id);
      }
    }
    CHECK(ids.size() == kThreads * kPerThread);  // next_id never repeats
  }

  TEST_CASE("generate_async: interleaved events of two ids reach their own callbacks") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kPairs);
    auto client = Client::connect(f.path, kHangLimitMs);
    std::mutex mu;
    std::condition_variable cv;
    std::map<std::string, std::vector<std::string>> seen;  // id -> "token:<id>" / "done:<id>"
    int finished = 0;
    auto record = [&](const std::string& who, const char* kind, const json& ev) {
      std::lock_guard<std::mutex> lock(mu);
      seen[who].push_back(std::string(kind) + ":" + ev["id"].get<std::string>());
      if (std::string(kind) != "token") ++finished;
      cv.notify_all();
    };
    for (const std::string id : {"a", "b"}) {
      llama2::GenerateEvents ev;
      ev.on_token = [&, id](const json& e) { record(id, "token", e); };
      ev.on_done = [&, id](const json& e) { record(id, "done", e); };
      ev.on_error = [&, id](const json& e) { record(id, "error", e); };
      client->generate_async({{"op", "generate"}, {"id", id}, {"prompt", "x"}}, ev);
    }
    std::unique_lock<std::mutex> lock(mu);
    REQUIRE(
        cv.wait_for(lock, std::chrono::milliseconds(kHangLimitMs), [&] { return finished == 2; }));
    for (const std::string id : {"a", "b"}) {
      const std::vector<std::string> want = {"token:" + id, "token:" + id, "done:" + id};
      CHECK(seen[id] == want);
    }
  }

  TEST_CASE("health and stats") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kPairs);
    auto client = Client::connect(f.path, kHangLimitMs);
    const json h = client->health(kHangLimitMs);
    CHECK(h["event"] == "health");
    CHECK(h["status"] == "ready");
    CHECK(client->stats(kHangLimitMs) == "llama2_requests_running 0\n");
  }

  TEST_CASE("connecting to a missing socket is an Error naming the path") {
    Fixture f;
    try {
      Client::connect(f.path, kHangLimitMs);
      FAIL("connect did not throw");
    } catch (const llama2::Error& e) {
      const std::string what = e.what();
      CHECK(what.find(f.path) != std::string::npos);
      CHECK(what.find("server not running") != std::string::npos);
    }
  }

  TEST_CASE("local misuse is an Error; nothing is sent") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kSilent);
    auto client = Client::connect(f.path, kHangLimitMs);
    CHECK_THROWS_AS(client->generate_async({{"prompt", "x"}}, {}), llama2::Error);
    CHECK_THROWS_AS(client->generate_async({{"id", ""}, {"prompt", "x"}}, {}), llama2::Error);
    CHECK_THROWS_AS(client->generate_async({{"op", "health"}, {"id", "x"}}, {}), llama2::Error);
    CHECK_THROWS_AS(client->generate({{"prompt", std::string(llama2::kMaxFrameBytes, 'x')}}, 1000),
                    llama2::Error);
    client->generate_async({{"id", "dup"}, {"prompt", "x"}}, {});
    CHECK_THROWS_AS(client->generate_async({{"id", "dup"}, {"prompt", "x"}}, {}), llama2::Error);
  }

  TEST_CASE("server closing mid-stream releases the waiting generate with server_unavailable") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kCloseMidStream);
    auto client = Client::connect(f.path, kHangLimitMs);
    int tokens = 0;
    const json r =
        client->generate({{"prompt", "x"}}, kHangLimitMs, [&](const json&) { ++tokens; });
    CAPTURE(r.dump());
    // server_unavailable, not timeout: the drop was noticed, not waited out.
    CHECK(r["event"] == "error");
    CHECK(r["code"] == "server_unavailable");
    CHECK(r["message"].get<std::string>().find(f.path) != std::string::npos);
    CHECK(tokens == 1);
    CHECK_FALSE(client->connected());
    // Every later request fails at once instead of waiting.
    CHECK(client->generate({{"prompt", "x"}}, kHangLimitMs)["code"] == "server_unavailable");
    CHECK(client->health(kHangLimitMs)["code"] == "server_unavailable");
    CHECK_THROWS_AS(client->stats(kHangLimitMs), llama2::Error);
  }

  TEST_CASE("client timeout sends cancel and returns code timeout; the connection stays usable") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kSilent);
    auto client = Client::connect(f.path, kHangLimitMs);
    const json r = client->generate({{"id", "slow"}, {"prompt", "x"}}, 50);
    CHECK(r["event"] == "error");
    CHECK(r["code"] == "timeout");
    CHECK(r["id"] == "slow");
    CHECK(server.wait_for("cancel", "slow"));
    // The server's late done/cancelled for "slow" is dropped; health still pairs with its answer.
    CHECK(client->health(kHangLimitMs)["event"] == "health");
  }

  TEST_CASE("destroying the Client fails generations in flight before it returns") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kSilent);
    auto client = Client::connect(f.path, kHangLimitMs);
    std::atomic<int> errors{0};
    json last;
    llama2::GenerateEvents ev;
    ev.on_error = [&](const json& e) {
      last = e;
      ++errors;
    };
    client->generate_async({{"id", "a"}, {"prompt", "x"}}, ev);
    client->generate_async({{"id", "b"}, {"prompt", "x"}}, ev);
    REQUIRE(server.wait_for("generate", "b"));
    client.reset();
    CHECK(errors == 2);
    CHECK(last["code"] == "server_unavailable");
  }

  TEST_CASE("a frame nested too deeply drops the connection instead of the process") {
    Fixture f;
    FakeServer server(f.path, FakeServer::Mode::kDeepEvent);
    auto client = Client::connect(f.path, kHangLimitMs);
    const json r = client->generate({{"prompt", "x"}}, kHangLimitMs);
    CHECK(r["code"] == "server_unavailable");
    CHECK(r["message"].get<std::string>().find("deeper") != std::string::npos);
  }

  TEST_CASE("json_nesting_exceeds counts brackets outside strings only") {
    using llama2::json_nesting_exceeds;
    CHECK_FALSE(json_nesting_exceeds(R"({"a":[1,{"b":[]}]})", 4));
    CHECK(json_nesting_exceeds(R"({"a":[1,{"b":[]}]})", 3));
    CHECK_FALSE(json_nesting_exceeds(R"({"s":"[[[[{{{{"})", 1));
    // An escaped quote does not end the string; an escaped backslash before a quote does.
    CHECK_FALSE(json_nesting_exceeds(R"({"s":"\"[[[[\\"})", 1));
    CHECK(json_nesting_exceeds(R"({"s":"\\",[[]]})", 2));
    CHECK(json_nesting_exceeds(std::string(100000, '[') + std::string(100000, ']'), 64));
    CHECK_FALSE(json_nesting_exceeds("", 0));
  }
}
