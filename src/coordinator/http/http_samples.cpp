#include "coordinator/http/http_samples.h"

#include "coordinator/http/prompt_scoring.h"
#include "coordinator/http/tool_api.h"
#include "coordinator/requests/request.h"

namespace llama2 {

std::optional<ApiError> make_samples(ApiRequest& api, std::vector<Reservation>& places,
                                     const HttpDeps& deps, SinkFlusher& notifier,
                                     std::vector<HttpSample>* samples) {
  const auto now = std::chrono::steady_clock::now();
  for (size_t p = 0; p <= api.more_prompts.size(); ++p) {
    ParsedRequest& request = p == 0 ? api.request : api.more_prompts[p - 1].request;
    // Tokenized here, on this connection's own thread, then the one prompt-length check.
    std::optional<Refusal> refusal = prepare_prompt(request, deps.tokenizer, deps.api.config,
                                                    deps.limits.prompt, deps.constraints);
    if (refusal || deps.inbox.draining()) {  // the places go back as they are dropped
      if (!refusal) refusal = Refusal{ErrorCode::kShuttingDown, "the server began shutting down"};
      return api_refusal(*refusal, api);
    }
    if (api.max_tokens_key.empty()) {  // no max_tokens: the rest of the context
      request.params.max_new_tokens = api_default_max_tokens(
          static_cast<int>(request.prompt.size()), deps.limits.prompt, deps.api.max_tokens_cap);
    }
    ApiScoring scoring = api.scoring;
    if (p > 0) scoring.echo_text = api.more_prompts[p - 1].echo_text;
    if (scoring.echo || scoring.prompt_logprobs) scoring.prompt = request.prompt;
    if (scoring.echo && scoring.echo_text.empty())
      scoring.echo_text = deps.tokenizer.decode(request.prompt);
    for (int j = 0; j < api.n; ++j) {
      HttpSample s;
      s.index = static_cast<int>(p) * api.n + j;
      s.leader_at = s.index - j;
      s.scoring = scoring;
      // An HTTP/1.1 connection has one request in flight: each exchange is its own client.
      s.ex = std::make_shared<HttpExchange>(deps.inbox.new_client(), deps.inbox.new_ticket(),
                                            request.params.logprobs, api.stream, notifier);
      EngineCommand cmd;
      cmd.kind = EngineCommand::Kind::kGenerate;
      cmd.client = s.ex->client();
      cmd.ticket = s.ex->ticket();
      cmd.request = request;
      if (cmd.request.params.seed) *cmd.request.params.seed += static_cast<uint64_t>(j);
      cmd.place = std::move(places[static_cast<size_t>(s.index)]);
      cmd.deadline = now + std::chrono::milliseconds(deps.limits.request_timeout_ms);
      cmd.sink = s.ex;
      s.pending = std::move(cmd);
      samples->push_back(std::move(s));
    }
  }
  return std::nullopt;
}

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

ApiResult sample_result(const HttpSample& s, const ApiResponseHead& head,
                        const Tokenizer& tokenizer) {
  const ApiKind kind = head.kind;
  const Finished& f = s.end->finished;
  ApiResult r{f.finish_reason, f.prompt_tokens, static_cast<int>(f.tokens.size()), f.text};
  r.cached_tokens = f.cached_tokens;
  r.index = s.index;
  r.speculative = speculative_json(f);
  if (head.tools) r.tool_calls = parse_tool_calls(f.text);  // else the text is content
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
