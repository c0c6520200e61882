// The sequences of one HTTP generation request (issue 35, point 2): every prompt of a batched
// /v1/completions times `n` choices, each its own engine generation with its own HttpExchange,
// answered together as choices indexed prompt x n + j (OpenAI's order). No HTTP library here.
//
// The prompt is prefilled once per prompt: only its first choice (the leader) is posted at
// first; the others follow once the leader has news (its prompt is computed, so its full KV
// blocks are in the prefix cache and the followers share them: block_allocator.h). Admission
// counts every sequence: each holds its own place from the start.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "coordinator/http/http_exchange.h"
#include "coordinator/http/http_front.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/serving/engine_inbox.h"

namespace llama2 {

class Tokenizer;
class ToolCallReader;  // tool_api.h

struct HttpSample {
  std::shared_ptr<HttpExchange> ex;
  int index = 0;       // the choice's index
  int leader_at = 0;   // the index of its prompt's first choice (itself for a leader)
  ApiScoring scoring;  // its prompt's echo text and ids, when asked
  std::optional<EngineCommand> pending;  // a follower not posted yet
  std::optional<HttpExchange::End> end;
  // Streams: the text sent so far (completions' text_offset), and with tools, its text read for
  // calls.
  int text_bytes = 0;
  std::shared_ptr<ToolCallReader> tools;
  bool posted() const { return !pending.has_value(); }
};

// Every sequence of `api` (prompts x n) as a sample ready to post (pending), each with its place
// from `places` (one per sequence, in index order), tokenized and length-checked here
// (prepare_prompt, on the connection's thread) and seeded seed + j; or the refusal to answer.
std::optional<ApiError> make_samples(ApiRequest& api, std::vector<Reservation>& places,
                                     const HttpDeps& deps, SinkFlusher& notifier,
                                     std::vector<HttpSample>* samples);

// Posts every pending sample whose leader has a token (HttpExchange::started) or has ended.
void post_ready(std::vector<HttpSample>& samples, EngineInbox& inbox);
// True when every sample has ended.
bool all_ended(const std::vector<HttpSample>& samples);
// The first sample that ended with an error, or nullptr.
const HttpSample* failed_sample(const std::vector<HttpSample>& samples);

// Takes what arrived for each posted, unfinished sample: the first waits up to `wait`, the
// others not at all. Calls `on_news(sample, news)` for each; keeps the end.
template <typename F>
void take_news(std::vector<HttpSample>& samples, std::chrono::milliseconds wait, F&& on_news) {
  bool waited = false;
  for (HttpSample& s : samples) {
    if (!s.posted() || s.end) continue;
    HttpExchange::News news = s.ex->take(waited ? std::chrono::milliseconds(0) : wait);
    waited = true;
    on_news(s, news);
    if (news.end) s.end = std::move(news.end);
  }
}

// A finished sample's choice: its text (or, with tools, its calls), logprobs (when asked) and
// scoring (echo, prompt_logprobs).
ApiResult sample_result(const HttpSample& s, const ApiResponseHead& head,
                        const Tokenizer& tokenizer);

// The request's usage: each prompt's tokens once (its leader's, cached tokens too), every
// choice's completion tokens.
nlohmann::json samples_usage(const std::vector<HttpSample>& samples);

}  // namespace llama2
