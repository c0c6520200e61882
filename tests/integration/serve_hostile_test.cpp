// Hostile clients against `llama2 serve` under mpirun -np 2 (CPU backend), one scenario per run
// (issue 14, items 1-3, 7, 8 and the id echo of item 9):
//
//   llama2_serve_hostile_test LLAMA2_BINARY MODELS_DIR MPIRUN_SH SCENARIO
//
//   frames          the four frames that killed rank 0 (an error reply quoting ~1 MiB of client
//                   input did not fit a frame), a 500 KB unknown key (reply < 8 KB), ids that are
//                   not echoed verbatim; after each the server still answers a new client.
//   tokenize        health p99 < 250 ms while three clients send 1 MB text prompts, and while they
//                   send prompts that pass the byte-length refusal and must really be tokenized.
//   per_connection  a client pipelining long generations without reading cannot hold every batch
//                   slot: another client is served promptly; the excess gets too_many_in_flight.
//   fd_limit        rank 0 at its fd limit answers or closes new connections promptly and does not
//                   spin (CPU time of rank 0 over 2 s read from /proc/PID/stat).
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <memory>
#include <mutex>

#include "serve_harness.h"

using namespace serve_harness;

namespace {

std::string g_llama2, g_models, g_mpirun, g_tmp;

// One raw request and its reply: the reply payload ("" when none came) and whether the
// connection was closed instead.
struct Exchange {
  std::string payload;
  json reply = json::object();
  bool closed = false;
};

Exchange round_trip(const std::string& socket, const std::string& request_payload,
                    int timeout_ms = 10000) {
  Exchange e;
  RawConn c(socket);
  if (!c.ok() || !c.send_all(frame_of(request_payload))) {
    e.closed = true;
    return e;
  }
  e.closed = c.read_frame(&e.payload, timeout_ms) == RawConn::Got::kClosed;
  e.reply = json::parse(e.payload, nullptr, false);
  if (!e.reply.is_object()) e.reply = json::object();  // no reply, or not an event
  return e;
}

// ---- items 1, 2, 9: error replies are bounded and always frameable ----------------------------
void scenario_frames() {
  int starts = 0;
  auto start = [&] {
    return std::make_unique<Server>(g_mpirun, g_llama2, g_models + "/tiny-gqa", g_tmp,
                                    "frames" + std::to_string(starts++),
                                    std::vector<std::string>{});
  };
  std::unique_ptr<Server> server = start();
  struct Case {
    std::string name, payload;
  };
  // As long as a 1 MiB request frame allows: an error reply quoting it whole does not fit a frame.
  const std::string mib_less(1048576 - 64, 'k');
  std::string quotes = R"({"op":"generate","id":"q","prompt_tokens":[")";
  for (int i = 0; i < 300000; ++i) quotes += "\\\"";
  quotes += "\"]}";
  const std::vector<Case> crashers = {
      {"unknown key of ~1 MiB", R"({"op":"generate","id":"a","prompt":"x",")" + mib_less + "\":1}"},
      {"unknown op of ~1 MiB", R"({"op":")" + mib_less + "\"}"},
      {"~1 MiB string inside prompt_tokens",
       R"({"op":"generate","id":"t","prompt_tokens":[")" + mib_less + "\"]}"},
      {"600 KB frame of 300,000 escaped quotes in prompt_tokens", quotes},
  };
  for (const Case& c : crashers) {
    const Exchange e = round_trip(server->socket, c.payload);
    check(e.reply.value("code", "") == "invalid_request" && e.payload.size() < 8192,
          c.name + " (" + std::to_string(c.payload.size()) + " bytes): invalid_request, reply of " +
              std::to_string(e.payload.size()) + " bytes");
    const bool up = server->healthy();
    check(up, c.name + ": the server still answers a new client");
    if (!up) server = start();  // so that each frame is tried on a live server
  }
  Server& s = *server;

  const Exchange key = round_trip(
      s.socket, R"({"op":"generate","id":"k","prompt":"x",")" + std::string(500000, 'z') + "\":1}");
  const std::string msg = key.reply.value("message", "");
  check(key.payload.size() > 0 && key.payload.size() < 8192 &&
            msg.find("500000") != std::string::npos,
        "500 KB unknown key: reply of " + std::to_string(key.payload.size()) +
            " bytes (< 8 KB) that states the key's length: " + msg.substr(0, 300));

  // Ids: echoed only when they are short strings or small integers (item 9).
  struct IdCase {
    std::string name, payload;
    json expect_id;
  };
  const std::vector<IdCase> ids = {
      {"cancel with a 300 KB id", R"({"op":"cancel","id":")" + std::string(300000, 'i') + "\"}",
       nullptr},
      {"unknown op with an object id", R"({"op":"nope","id":{"a":[1,2,3]}})", nullptr},
      {"generate with a 129-byte id",
       R"({"op":"generate","prompt":"x","id":")" + std::string(129, 'i') + "\"}", nullptr},
      {"cancel with a small integer id", R"({"op":"cancel","id":12})", 12},
      {"generate with a valid id and a bad value",
       R"({"op":"generate","id":"ok-1","prompt":"x","top_k":"many"})", "ok-1"},
  };
  for (const IdCase& c : ids) {
    const Exchange e = round_trip(s.socket, c.payload);
    check(e.reply.value("event", "") == "error" && e.reply.contains("id") &&
              e.reply["id"] == c.expect_id && e.payload.size() < 8192,
          c.name + ": id echoed as " + c.expect_id.dump() + " (reply " + e.payload.substr(0, 200) +
              ")");
  }
  check(s.running() && s.healthy(), "the server is up after every hostile frame");
}

// ---- item 3: prompts are tokenized off the I/O thread -------------------------------------------
// Text of about `bytes` bytes from the project's corpus (mixed scripts, like real prompts).
std::string prompt_text(size_t bytes) {
  const std::string corpus = read_file(std::string(LLAMA2_SOURCE_DIR) + "/data/corpus.txt");
  std::string out;
  while (out.size() + corpus.size() <= bytes) out += corpus;
  size_t cut = bytes - out.size();
  while (cut > 0 && (static_cast<unsigned char>(corpus[cut]) & 0xC0) == 0x80) --cut;
  return out + corpus.substr(0, cut);
}

// health latencies (ms) measured every 10 ms while three clients send `prompt` twice each.
std::vector<double> health_under_prompts(const Server& s, const std::string& prompt,
                                         std::vector<std::string>* codes, double* slowest_ms) {
  std::atomic<int> senders{3};
  std::mutex mu;
  std::vector<std::thread> th;
  *slowest_ms = 0;
  for (int t = 0; t < 3; ++t) {
    th.emplace_back([&, t] {
      auto c = llama2::Client::connect(s.socket, 5000);
      for (int i = 0; i < 2; ++i) {
        const auto t0 = Clock::now();
        const json r = c->generate(
            json{{"id", "p" + std::to_string(t) + "-" + std::to_string(i)}, {"prompt", prompt}},
            60000);
        std::lock_guard<std::mutex> lock(mu);
        *slowest_ms = std::max(*slowest_ms, ms_since(t0));
        codes->push_back(r.value("code", r.value("event", "?")));
      }
      --senders;
    });
  }
  std::vector<double> lat;
  auto c = llama2::Client::connect(s.socket, 5000);
  while (senders > 0) {
    const auto t0 = Clock::now();
    const json h = c->health(10000);
    lat.push_back(h.value("event", "") == "health" ? ms_since(t0) : 1e9);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // pacing, not synchronisation
  }
  for (auto& x : th) x.join();
  std::sort(lat.begin(), lat.end());
  return lat;
}

void scenario_tokenize() {
  // The tiny model with a 32k context: long prompts are worth tokenizing, KV stays small.
  const std::string model = g_tmp + "/long-context";
  const std::string make = g_llama2 + " make-test-model --out " + model +
                           " --max-position-embeddings 32768 --vocab 512 --tokenizer " + g_models +
                           "/tiny-gqa/tokenizer.model > /dev/null";
  if (std::system(make.c_str()) != 0) return check(false, "make the long-context model");
  Server s(g_mpirun, g_llama2, model, g_tmp, "tokenize", {"--max-batch-size", "2"});
  // 1 MB prompts cannot fit 32k tokens; 200 KB ones pass any sound byte-length bound (the tiny
  // tokenizer's longest piece is longer than 7 bytes) and are refused only after tokenizing.
  for (const size_t bytes : {size_t{1000000}, size_t{200000}}) {
    std::vector<std::string> codes;
    double slowest = 0;
    const auto lat = health_under_prompts(s, prompt_text(bytes), &codes, &slowest);
    const double p99 = lat.empty() ? 1e9 : lat[std::min(lat.size() - 1, lat.size() * 99 / 100)];
    const bool refused = std::count(codes.begin(), codes.end(), "prompt_too_long") == 6;
    check(refused, std::to_string(bytes) + "-byte prompts x 6: all prompt_too_long (slowest " +
                       std::to_string(static_cast<int>(slowest)) + " ms)");
    check(!lat.empty() && p99 < 250.0, "health p99 " + std::to_string(p99) + " ms (max " +
                                           std::to_string(lat.empty() ? 0 : lat.back()) + " ms, " +
                                           std::to_string(lat.size()) +
                                           " probes) while three clients send " +
                                           std::to_string(bytes) + "-byte prompts (< 250 ms)");
  }
  // A generation cancelled while a worker tokenizes its prompt still ends with done/cancelled.
  {
    auto c = llama2::Client::connect(s.socket, 5000);
    std::mutex mu;
    std::condition_variable cv;
    json last;
    llama2::GenerateEvents ev;
    ev.on_done = [&](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      last = e;
      cv.notify_all();
    };
    ev.on_error = ev.on_done;
    c->generate_async(json{{"id", "cut"}, {"prompt", prompt_text(40000)}, {"max_new_tokens", 16}},
                      ev);
    c->cancel("cut");
    std::unique_lock<std::mutex> lock(mu);
    cv.wait_for(lock, std::chrono::seconds(20), [&] { return !last.is_null(); });
    check(last.value("finish_reason", "") == "cancelled",
          "cancel while the prompt is tokenized -> done/cancelled: " + last.dump().substr(0, 160));
  }
  // A long prompt that fits is tokenized and served.
  auto c = llama2::Client::connect(s.socket, 5000);
  const json ok = c->generate(json{{"prompt", prompt_text(6000)}, {"max_new_tokens", 2}}, 60000);
  check(ok.value("event", "") == "done" &&
            ok.value("usage", json::object()).value("prompt_tokens", 0) > 1000,
        "a 6 KB prompt that fits is tokenized and served: " + ok.dump().substr(0, 200));
}

// ---- item 7: per-connection cap -----------------------------------------------------------------
void scenario_per_connection() {
  const std::string model = g_tmp + "/long-context";
  const std::string make = g_llama2 + " make-test-model --out " + model +
                           " --max-position-embeddings 32768 --vocab 512 --tokenizer " + g_models +
                           "/tiny-gqa/tokenizer.model > /dev/null";
  if (std::system(make.c_str()) != 0) return check(false, "make the long-context model");
  // 4 batch slots: the default cap is half of them.
  Server s(g_mpirun, g_llama2, model, g_tmp, "percon",
           {"--max-batch-size", "4", "--max-queue", "64"});
  RawConn greedy(s.socket);
  std::string burst;
  for (int i = 0; i < 40; ++i) {
    burst += frame_of(json{
        {"op", "generate"},
        {"id", "g" + std::to_string(i)},
        {"prompt", "hold"},
        {"max_new_tokens", 30000},
        {"ignore_eos",
         true}}.dump());
  }
  check(greedy.send_all(burst), "one connection pipelines 40 long generations without reading");
  auto victim = llama2::Client::connect(s.socket, 5000);
  const auto t0 = Clock::now();
  const json r = victim->generate(json{{"prompt", "hello"}, {"max_new_tokens", 8}}, 5000);
  const double ms = ms_since(t0);
  check(r.value("event", "") == "done" && ms < 3000,
        "another client is served in " + std::to_string(static_cast<int>(ms)) +
            " ms (< 3000): " + r.dump().substr(0, 160));
  // The victim's own sequence may still count for a moment after its done event.
  json h;
  for (int i = 0; i < 100; ++i) {
    h = victim->health(5000);
    if (h.value("running", 0) <= 2 && h.value("queued", 99) == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  check(h.value("running", 0) <= 2 && h.value("queued", 99) == 0,
        "the pipelining connection holds at most 2 of 4 slots and no queue place: " + h.dump());
  int capped = 0;
  std::string payload, message;
  const auto until = Clock::now() + std::chrono::seconds(5);  // token events keep coming
  while (Clock::now() < until && greedy.read_frame(&payload, 2000) == RawConn::Got::kFrame) {
    const json e = json::parse(payload, nullptr, false);
    if (e.is_object() && e.value("code", "") == "too_many_in_flight") {
      ++capped;
      message = e.value("message", "");
    }
    if (capped == 38) break;
  }
  check(capped == 38 && message.find("--max-inflight-per-connection") != std::string::npos,
        std::to_string(capped) + " of 40 refused too_many_in_flight naming the flag: " + message);
}

// ---- item 8: at the fd limit
// --------------------------------------------------------------------- utime + stime of `pid` in
// seconds.
double cpu_seconds(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  std::istringstream in(stat.substr(stat.rfind(')') + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

int open_fds(pid_t pid) {
  int n = 0;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/fd").c_str());
  if (d == nullptr) return -1;
  for (dirent* e; (e = readdir(d)) != nullptr;) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

void scenario_fd_limit() {
  Server s(g_mpirun, g_llama2, g_models + "/tiny-gqa", g_tmp, "fdlimit", {});
  const pid_t rank0 = s.rank0();
  if (rank0 <= 0) return check(false, "found rank 0");
  const double idle0 = cpu_seconds(rank0);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the idle measurement window
  const double idle_cpu = cpu_seconds(rank0) - idle0;
  rlimit old{};
  prlimit(rank0, RLIMIT_NOFILE, nullptr, &old);
  const int used = open_fds(rank0);
  rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(used) + 4;  // room for about four more connections
  check(prlimit(rank0, RLIMIT_NOFILE, &low, nullptr) == 0, "rank 0's fd limit lowered to " +
                                                               std::to_string(low.rlim_cur) + " (" +
                                                               std::to_string(used) + " open)");
  std::vector<std::unique_ptr<RawConn>> held;
  int served = 0, refused = 0, told = 0, hung = 0;
  double slowest = 0;
  for (int i = 0; i < 12; ++i) {
    auto c = std::make_unique<RawConn>(s.socket);
    const auto t0 = Clock::now();
    std::string payload;
    RawConn::Got got = RawConn::Got::kClosed;
    if (c->ok()) {
      // The send fails when the server already refused and closed; its answer is read anyway.
      c->send_all(frame_of(R"({"op":"health"})"));
      got = c->read_frame(&payload, 2000);
    }
    slowest = std::max(slowest, ms_since(t0));
    json e = json::parse(payload, nullptr, false);
    if (!e.is_object()) e = json::object();
    if (got == RawConn::Got::kFrame && e.value("event", "") == "health") {
      ++served;
      held.push_back(std::move(c));  // keeps its fd open on the server
    } else if (got == RawConn::Got::kClosed ||
               (got == RawConn::Got::kFrame && e.value("event", "") == "error")) {
      ++refused;
      told += e.value("code", "") == "too_many_connections";
      held.push_back(std::move(c));
    } else {
      ++hung;
      held.push_back(std::move(c));  // stays in the listen backlog
      if (hung == 3) break;
    }
  }
  check(served >= 1 && refused >= 1 && told >= 1 && hung == 0,
        "at the fd limit: " + std::to_string(served) + " served, " + std::to_string(refused) +
            " refused promptly (" + std::to_string(told) + " with too_many_connections), " +
            std::to_string(hung) + " without an answer in 2 s (slowest " +
            std::to_string(static_cast<int>(slowest)) + " ms)");
  // Through the client library: the request fails with server_unavailable, saying why.
  try {
    auto c = llama2::Client::connect(s.socket, 2000);
    const json r = c->generate(json{{"prompt", "x"}, {"max_new_tokens", 1}}, 5000);
    check(r.value("code", "") == "server_unavailable" &&
              r.value("message", "").find("too_many_connections") != std::string::npos,
          "client library at the fd limit: " + r.dump().substr(0, 240));
  } catch (const std::exception& e) {
    check(false, std::string("client library at the fd limit: ") + e.what());
  }
  const double cpu0 = cpu_seconds(rank0);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // the measurement window
  const double cpu = cpu_seconds(rank0) - cpu0;
  // Idle, rank 0 uses about nothing (measured before the limit was lowered); a thread spinning on
  // poll() takes a core's share, ~0.3 s of these 2 s even on a loaded 2-core machine.
  check(cpu < idle_cpu + 0.1, "rank 0 used " + std::to_string(cpu) +
                                  " s of CPU in 2 s with clients waiting at the fd limit (idle: " +
                                  std::to_string(idle_cpu) + " s; bound idle + 0.1 s)");
  held.clear();
  prlimit(rank0, RLIMIT_NOFILE, &old, nullptr);
  check(s.healthy(), "after the clients leave, new connections are served");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: llama2_serve_hostile_test LLAMA2_BINARY MODELS_DIR MPIRUN_SH SCENARIO\n"
                 "  SCENARIO: frames | tokenize | per_connection | fd_limit\n");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  g_llama2 = argv[1];
  g_models = argv[2];
  g_mpirun = argv[3];
  const std::string scenario = argv[4];
  char tmpl[] = "/tmp/llama2_hostile_XXXXXX";
  g_tmp = mkdtemp(tmpl);
  if (scenario == "frames") {
    scenario_frames();
  } else if (scenario == "tokenize") {
    scenario_tokenize();
  } else if (scenario == "per_connection") {
    scenario_per_connection();
  } else if (scenario == "fd_limit") {
    scenario_fd_limit();
  } else {
    std::fprintf(stderr, "unknown scenario '%s'\n", scenario.c_str());
    return 2;
  }
  std::printf("%d passed, %d failed\n", passes(), failures());
  std::error_code ec;
  std::filesystem::remove_all(g_tmp, ec);
  return failures() == 0 && passes() > 0 ? 0 : 1;
}
