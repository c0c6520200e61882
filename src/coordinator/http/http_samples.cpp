#include "coordinator/http/http_samples.h"

#include "coordinator/http/prompt_scoring.h"

namespace llama2 {

void post_ready(std::vector<HttpSample>& samples, EngineInbox& inbox) {
  for (HttpSample& s : samples) {
    if (s.posted()) continue;
    const HttpSample& leader = samples[static_cast<size_t>(s.leader_at)];
    if (&leader != &s && !leader.ex->started() && !leader.end) continue;
    inbox.post(std::move(*s.pending));
    s.pending.reset();
  }
}

bool all_ended(const std::vector<HttpSample>& samples) {
  for (const HttpSample& s : samples)
    if (!s.end) return false;
  return true;
}

const HttpSample* failed_sample(const std::vector<HttpSample>& samples) {
  for (const HttpSample& s : samples)
    if (s.end && s.end->error_code) return &s;
  return nullptr;
}

ApiResult sample_result(const HttpSample& s, ApiKind kind, const Tokenizer& tokenizer) {
  const Finished& f = s.end->finished;
  ApiResult r{f.finish_reason, f.prompt_tokens, static_cast<int>(f.tokens.size()), f.text};
  r.cached_tokens = f.cached_tokens;
  r.index = s.index;
  if (s.ex->logprobs()) {
    std::vector<ApiTokenLogprobs> lp;
    for (size_t i = 0; i < f.logprobs.size() && i < f.tokens.size(); ++i) {
      lp.push_back({f.tokens[i], f.logprobs[i],
                    i < f.top_logprobs.size() ? f.top_logprobs[i] : std::vector<TopLogprob>{}});
    }
    r.logprobs = api_logprobs(kind, lp, tokenizer);
  }
  apply_scoring(s.scoring, f, tokenizer, &r);
  return r;
}

nlohmann::json samples_usage(const std::vector<HttpSample>& samples) {
  int prompt = 0, completion = 0, cached = 0;
  for (const HttpSample& s : samples) {
    if (!s.end) continue;
    const Finished& f = s.end->finished;
    completion += static_cast<int>(f.tokens.size());
    if (s.leader_at != s.index) continue;
    prompt += f.prompt_tokens;
    cached += f.cached_tokens;
  }
  return api_usage(prompt, completion, cached);
}

}  // namespace llama2
