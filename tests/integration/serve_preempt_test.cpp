// KV blocks on demand and preemption in `llama2 serve`, end to end (CPU backend, real sockets),
// one case per run under a time limit:
//
//   llama2_serve_preempt_test LLAMA2_BINARY MODEL_DIR MPIRUN_SH admission|preempt
//
// admission  a KV cache of 64 blocks of 4 tokens holds 4 sequences of the full --max-seq-len 64;
//            32 requests that may each run to the whole context (max_new_tokens 59 after their
//            5-token prompts) all run at once: `health` shows 32 running, none queued. Admission
//            reserved prompt + max_new_tokens before, so 4 ran and 28 waited.
// preempt    -np 2 (tensor parallel), 12 blocks of 16 tokens, 8 concurrent greedy streams of 56
//            tokens that need 4 blocks each at the end: the newest running stream is preempted
//            and recomputed, again and again (llama2_preemptions_total > 0). Every stream's token
//            events count 0, 1, 2, ... without a gap or a repeat, their text is the `done` text,
//            and its tokens equal those of the same request run alone afterwards (no preemption).
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
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

void case_admission() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "admission", 1,
                case_env().model,
                {"--max-batch-size", "32", "--max-inflight-per-connection", "32", "--max-seq-len",
                 "64", "--block-size", "4", "--kv-cache-blocks", "64", "--cpu-threads", "1",
                 "--prefix-caching", "off"},
                // Slow steps: the 32 generations are still running when health is asked.
                {"LLAMA2_TEST_STEP_DELAY_MS=200"});
  if (!check(job.wait_up(120), "server up")) return;
  auto c = llama2::Client::connect(job.socket, 2000);
  std::vector<std::string> ids;
  for (int i = 0; i < 32; ++i) {
    ids.push_back("g" + std::to_string(i));
    c->generate_async(json{{"id", ids.back()},
                           {"prompt_tokens", {1, 20 + i, 30, 40, 50}},
                           {"max_new_tokens", 59},
                           {"temperature", 0}},
                      llama2::GenerateEvents{});
  }
  int most = 0, queued = -1;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (most < 32 && std::chrono::steady_clock::now() < until) {
    const json h = c->health(5000);
    most = std::max(most, h.value("running", 0));
    queued = h.value("queued", -1);
  }
  check(most == 32, "32 generations that may each fill a quarter of the KV cache run at once (" +
                        std::to_string(most) + " seen running, " + std::to_string(queued) +
                        " queued)");
  for (const std::string& id : ids) c->cancel(id);
  if (case_env().failures > 0)
    std::printf("---- server log ----\n%s\n----\n", job.log_text().c_str());
}

// One stream's events, checked as they arrive.
struct Stream {
  std::vector<int> tokens;
  std::string text;
  json end;
  bool ordered = true;  // token indices 0, 1, 2, ...
};

json request(int i, const std::string& id) {
  std::vector<int> prompt = {1};
  for (int j = 0; j < 20; ++j) prompt.push_back(3 + (i * 37 + j * 11) % 400);
  return json{{"id", id},         {"prompt_tokens", prompt}, {"max_new_tokens", 56},
              {"temperature", 0}, {"ignore_eos", true},      {"stream", true}};
}

void case_preempt() {
  ServerJob job(case_env().mpirun, case_env().llama2, case_env().tmp, "preempt", 2,
                case_env().model,
                {"--max-batch-size", "8", "--max-inflight-per-connection", "8", "--kv-cache-blocks",
                 "12", "--block-size", "16", "--cpu-threads", "1"});
  if (!check(job.wait_up(120), "server up")) return;
  auto c = llama2::Client::connect(job.socket, 2000);
  std::mutex mu;
  std::condition_variable cv;
  std::map<int, Stream> streams;
  int ended = 0;
  for (int i = 0; i < 8; ++i) {
    llama2::GenerateEvents ev;
    ev.on_token = [&, i](const json& t) {
      std::lock_guard<std::mutex> lock(mu);
      Stream& s = streams[i];
      s.ordered = s.ordered && t.value("index", -1) == static_cast<int>(s.tokens.size());
      s.tokens.push_back(t.value("token_id", -1));
      s.text += t.value("text", "");
    };
    ev.on_done = [&, i](const json& e) {
      std::lock_guard<std::mutex> lock(mu);
      streams[i].end = e;
      ++ended;
      cv.notify_all();
    };
    ev.on_error = ev.on_done;
    c->generate_async(request(i, "p" + std::to_string(i)), ev);
  }
  {
    std::unique_lock<std::mutex> lock(mu);
    if (!check(cv.wait_for(lock, std::chrono::seconds(240), [&] { return ended == 8; }),
               "8 streams ended"))
      return;
  }
  const double preemptions = metric_sample(c->stats(5000), "llama2_preemptions_total");
  check(preemptions > 0,
        "streams were preempted (llama2_preemptions_total " + std::to_string(preemptions) + ")");
  for (int i = 0; i < 8; ++i) {
    const Stream& s = streams[i];
    const std::string name = "stream " + std::to_string(i);
    check(s.end.value("event", "") == "done" && s.end.value("finish_reason", "") == "length",
          name + " done with length: " + s.end.dump());
    check(s.ordered && s.tokens.size() == 56, name + ": 56 token events, indices in order");
    // Alone: no other stream, no preemption; greedy gives the same tokens.
    json alone = request(i, "a" + std::to_string(i));
    alone["stream"] = false;
    const json want = c->generate(alone, 120000);
    check(want.value("token_ids", std::vector<int>{}) == s.tokens,
          name + ": the same tokens as the request alone");
    check(want.value("text", "") == s.text, name + ": the same text as the request alone");
  }
  if (case_env().failures > 0)
    std::printf("---- server log ----\n%s\n----\n", job.log_text().c_str());
}

}  // namespace

int main(int argc, char** argv) {
  return llama2_test::case_main(argc, argv, "llama2_serve_preempt_test", "llama2_preempt",
                                {{"admission", case_admission}, {"preempt", case_preempt}});
}
