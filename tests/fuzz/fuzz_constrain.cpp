// libFuzzer target: the constraint engine's compilers (src/coordinator/constrain/: JSON Schema,
// regex, GBNF, choice, tool calls) and the matcher on what they accept, with the real tokenizer of
// tests/models/tiny-gqa (512 pieces: byte fallback, dummy prefix).
//
// Input: the first byte picks the kind (schema, json_object, regex, choice, GBNF, tool calls) and
// the whitespace mode; the rest is the constraint text (choices: split at '\n'). Limits are smaller
// than the server's so that one execution stays fast; what they bound is the same.
//
// Invariants (a violation traps, which libFuzzer reports as a crash):
//  - compiling either succeeds or throws ConstraintError (never another exception, a crash, a
//    hang or unbounded memory: libFuzzer's -timeout and -rss_limit_mb catch those);
//  - on a compiled grammar, walking up to 24 tokens chosen by a hash of the input: every token
//    the mask allows is accepted, a token it refuses is refused without changing the mask, EOS is
//    allowed exactly when is_accepting(), and rollback restores the earlier masks exactly.
// Build and run: FUZZ_TARGET=constrain tests/fuzz/run_fuzz.sh (tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/constrain/constraint.h"
#include "coordinator/constrain/matcher.h"
#include "coordinator/text/tokenizer.h"

#ifndef FUZZ_MODEL_DIR
#error "FUZZ_MODEL_DIR must name the tiny test model (tests/models/tiny-gqa)"
#endif

namespace {

namespace cst = llama2::constrain;

#define FUZZ_REQUIRE(cond)         \
  do {                             \
    if (!(cond)) __builtin_trap(); \
  } while (0)

const std::shared_ptr<const cst::TokenVocabulary>& vocab() {
  static const auto* v = new std::shared_ptr<const cst::TokenVocabulary>(
      cst::TokenVocabulary::from_tokenizer(llama2::Tokenizer(FUZZ_MODEL_DIR "/tokenizer.model")));
  return *v;
}

cst::ConstraintLimits fuzz_limits() {
  cst::ConstraintLimits l;
  l.max_text_bytes = 1 << 16;
  l.max_grammar_symbols = 50'000;
  l.max_rules = 20'000;
  l.max_repeat = 200;
  l.max_states_per_step = 512;
  l.max_closure_steps = 20'000;
  l.max_table_bytes = 8u << 20;
  return l;
}

bool allowed(const std::vector<uint32_t>& mask, int id) {
  return (mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

void walk(const std::shared_ptr<const cst::CompiledGrammar>& g, uint64_t h) {
  cst::GrammarMatcher m(g);
  const int eos = vocab()->eos_id();
  std::vector<std::vector<uint32_t>> masks;
  std::vector<uint32_t> mask(static_cast<size_t>(m.mask_words()));
  for (int step = 0; step < 24; ++step) {
    m.fill_mask(mask.data());
    FUZZ_REQUIRE(allowed(mask, eos) == m.is_accepting());
    masks.push_back(mask);
    std::vector<int> ok;
    int refused = -1;
    for (int id = 0; id < vocab()->size(); ++id) {
      if (allowed(mask, id) && id != eos) ok.push_back(id);
      if (!allowed(mask, id) && refused < 0 && (h >> 8) % 7 == static_cast<uint64_t>(id) % 7)
        refused = id;
    }
    if (refused >= 0) {
      FUZZ_REQUIRE(!m.accept_token(refused));
      std::vector<uint32_t> again(mask.size());
      m.fill_mask(again.data());
      FUZZ_REQUIRE(again == mask);
    }
    if (ok.empty()) break;
    h = h * 6364136223846793005ull + 1442695040888963407ull;
    FUZZ_REQUIRE(m.accept_token(ok[(h >> 33) % ok.size()]));
  }
  m.fill_mask(mask.data());
  if (masks.size() == static_cast<size_t>(m.steps())) masks.push_back(mask);  // [steps() + 1]
  const int back = static_cast<int>(h % static_cast<uint64_t>(m.steps() + 1));
  m.rollback(back);
  m.fill_mask(mask.data());
  FUZZ_REQUIRE(mask == masks[static_cast<size_t>(m.steps())]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  cst::ConstraintSpec spec;
  const uint8_t mode = data[0];
  spec.kind = static_cast<cst::ConstraintKind>((mode & 0x7f) % 6);  // 0x80: the spacing
  spec.whitespace = (mode & 0x80) ? cst::JsonWhitespace::kNone : cst::JsonWhitespace::kSingleSpace;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (spec.kind == cst::ConstraintKind::kChoice) {
    for (size_t start = 0;;) {
      const size_t nl = text.find('\n', start);
      spec.choices.push_back(text.substr(start, nl - start));
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
  } else {
    spec.text = text;
  }
  uint64_t h = 1469598103934665603ull;  // FNV-1a: the walk is a function of the input
  for (size_t i = 0; i < size; ++i) h = (h ^ data[i]) * 1099511628211ull;
  try {
    const auto g = cst::compile_constraint(spec, vocab(), fuzz_limits());
    walk(g, h);
  } catch (const cst::ConstraintError&) {
    // a refusal with a message: the expected outcome for most inputs
  }
  return 0;
}
