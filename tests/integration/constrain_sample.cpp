// Samples constrained outputs for tests/reference/constrain_validity.py: for each JSON Schema of a
// JSONL file, `--samples` random generations under the engine's mask over a SentencePiece
// vocabulary (a uniformly random allowed token each step; EOS, when allowed, with probability
// 1/2), each ending with `stop` (EOS taken) or `length` (`--max-tokens` reached). The output text
// is what the client would receive: tokenizer.decode of the ids (SentencePiece's own decode, not
// the engine's byte model).
//
//   llama2_constrain_sample --tokenizer MODEL --schemas IN.jsonl --out OUT.jsonl
//       [--samples 3] [--max-tokens 300] [--seed 1]
//   IN lines:  {"id": ..., "schema": {...}}
//   OUT lines: {"id": ..., "sample": k, "finish": "stop"|"length"|"refused", "text": ..., "error":
//   ...}
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "coordinator/constrain/constraint.h"
#include "coordinator/constrain/matcher.h"
#include "coordinator/text/tokenizer.h"

namespace {

namespace cst = llama2::constrain;
using json = nlohmann::ordered_json;  // keeps the schema's property order

struct Args {
  std::string tokenizer, schemas, out;
  int samples = 3, max_tokens = 300;
  unsigned seed = 1;
  bool replay = false;
};

std::string hex_words(const std::vector<uint32_t>& words) {
  static const char* const kHex = "0123456789abcdef";
  std::string s;
  for (uint32_t w : words)
    for (int shift = 28; shift >= 0; shift -= 4) s += kHex[(w >> shift) & 15];
  return s;
}

json replay(const std::shared_ptr<const cst::CompiledGrammar>& g, const std::vector<int>& tokens) {
  cst::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(m.mask_words()));
  json masks = json::array();
  int accepted = 0;
  for (int id : tokens) {
    m.fill_mask(mask.data());
    masks.push_back(hex_words(mask));
    if (!m.accept_token(id)) break;
    ++accepted;
  }
  if (accepted == static_cast<int>(tokens.size())) {
    m.fill_mask(mask.data());
    masks.push_back(hex_words(mask));
  }
  return {{"masks", masks}, {"accepted", accepted}};
}

json sample(const std::shared_ptr<const cst::CompiledGrammar>& g, const llama2::Tokenizer& tok,
            std::mt19937& rng, int max_tokens) {
  cst::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(m.mask_words()));
  std::vector<int> ids, allowed;
  for (int step = 0; step < max_tokens; ++step) {
    m.fill_mask(mask.data());
    allowed.clear();
    for (int id = 0; id < tok.vocab_size(); ++id)
      if (((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u) && id != tok.eos_id())
        allowed.push_back(id);
    if (m.is_accepting() && (allowed.empty() || rng() % 2 == 0)) {
      if (!m.accept_token(tok.eos_id())) throw llama2::Error("EOS allowed but refused");
      return {{"finish", "stop"}, {"text", tok.decode(ids)}};
    }
    if (allowed.empty()) throw llama2::Error("empty mask");
    const int id = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (!m.accept_token(id)) throw llama2::Error("an allowed token was refused");
    ids.push_back(id);
  }
  return {{"finish", "length"}, {"text", tok.decode(ids)}};
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--replay") a.replay = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--replay") ++i;
    if (i + 1 >= argc) break;
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--tokenizer") a.tokenizer = v;
    if (k == "--schemas") a.schemas = v;
    if (k == "--out") a.out = v;
    if (k == "--samples") a.samples = std::stoi(v);
    if (k == "--max-tokens") a.max_tokens = std::stoi(v);
    if (k == "--seed") a.seed = static_cast<unsigned>(std::stoul(v));
  }
  if (a.tokenizer.empty() || a.schemas.empty() || a.out.empty()) {
    std::fprintf(stderr,
                 "usage: llama2_constrain_sample --tokenizer MODEL --schemas IN --out OUT\n");
    return 2;
  }
  const llama2::Tokenizer tok(a.tokenizer);
  const auto vocab = cst::TokenVocabulary::from_tokenizer(tok);
  std::ifstream in(a.schemas);
  std::ofstream out(a.out);
  std::mt19937 rng(a.seed);
  std::string line;
  while (std::getline(in, line)) {
    const json row = json::parse(line);
    cst::ConstraintSpec spec;
    spec.text = row.at("schema").dump();
    if (row.value("whitespace", "space") == "none") spec.whitespace = cst::JsonWhitespace::kNone;
    std::shared_ptr<const cst::CompiledGrammar> g;
    try {
      g = cst::compile_constraint(spec, vocab);
    } catch (const cst::ConstraintError& e) {
      out << json{{"id", row.at("id")}, {"finish", "refused"}, {"error", e.what()}}.dump() << "\n";
      continue;
    }
    if (a.replay) {
      json result = replay(g, row.at("tokens").get<std::vector<int>>());
      result["id"] = row.at("id");
      out << result.dump() << "\n";
      continue;
    }
    for (int k = 0; k < a.samples; ++k) {
      json result = sample(g, tok, rng, a.max_tokens);
      result["id"] = row.at("id");
      result["sample"] = k;
      out << result.dump() << "\n";
    }
  }
  return out.good() ? 0 : 1;
}
