#include "coordinator/http/prompt_scoring.h"

#include <algorithm>
#include <string>

#include "coordinator/text/tokenizer.h"

namespace llama2 {

using nlohmann::json;

json api_echo_logprobs(const std::vector<int>& prompt, const std::vector<PromptLogprob>& scored,
                       int top_n, const json& generated, const Tokenizer& tokenizer) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  int offset = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    const std::string text = api_token_string(tokenizer, prompt[i]);
    toks.push_back(text);
    offsets.push_back(offset);
    offset += static_cast<int>(text.size());
    // Entry i - 1 scores token i; a generation cut short before its prompt was scored has none.
    if (i == 0 || i - 1 >= scored.size()) {
      lps.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    const PromptLogprob& p = scored[i - 1];
    lps.push_back(p.logprob);
    json top = json::object();
    const size_t n = std::min(p.top.size(), static_cast<size_t>(std::max(top_n, 0)));
    for (size_t j = 0; j < n; ++j)
      top[api_token_string(tokenizer, p.top[j].token)] = p.top[j].logprob;
    tops.push_back(top);
  }
  if (generated.is_object()) {
    for (const json& t : generated["tokens"]) toks.push_back(t);
    for (const json& t : generated["token_logprobs"]) lps.push_back(t);
    for (const json& t : generated["top_logprobs"]) tops.push_back(t);
    for (const json& t : generated["text_offset"]) offsets.push_back(offset + t.get<int>());
  }
  return json{
      {"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json api_prompt_logprobs(const std::vector<PromptLogprob>& scored, int top_n,
                         const Tokenizer& tokenizer) {
  json out = json::array({nullptr});
  for (const PromptLogprob& p : scored) {
    json entry = json::object();
    entry[std::to_string(p.token)] = {{"logprob", p.logprob},
                                      {"rank", p.rank},
                                      {"decoded_token", api_token_string(tokenizer, p.token)}};
    const size_t n = std::min(p.top.size(), static_cast<size_t>(std::max(top_n, 0)));
    for (size_t j = 0; j < n; ++j) {
      const TopLogprob& t = p.top[j];
      entry[std::to_string(t.token)] = {{"logprob", t.logprob},
                                        {"rank", static_cast<int>(j) + 1},
                                        {"decoded_token", api_token_string(tokenizer, t.token)}};
    }
    out.push_back(std::move(entry));
  }
  return out;
}

void apply_scoring(const ApiScoring& sc, const Finished& f, const Tokenizer& tokenizer,
                   ApiResult* r) {
  if (sc.echo) {
    r->text = (sc.echo_text.empty() ? tokenizer.decode(sc.prompt) : sc.echo_text) + r->text;
    if (sc.echo_top >= 0) {
      r->logprobs =
          api_echo_logprobs(sc.prompt, f.prompt_logprobs, sc.echo_top, r->logprobs, tokenizer);
    }
  }
  if (sc.prompt_logprobs)
    r->prompt_logprobs = api_prompt_logprobs(f.prompt_logprobs, *sc.prompt_logprobs, tokenizer);
}

}  // namespace llama2
