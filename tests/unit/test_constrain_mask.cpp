// Token masks of the constraint engine against an independent reference (constrain_test_util.h:
// an Earley recognizer over the grammar, fed the tokens' bytes one token at a time), on the
// tokenizers of tests/models/tiny-gqa (512 pieces) and models/docs-8m (4,096): random walks under
// the mask, every token of the vocabulary checked at every step. Also: the token byte model
// against SentencePiece's decode, the dummy prefix, byte-fallback characters, EOS, rollback, the
// grammar cache.
#include <doctest/doctest.h>

#include <random>
#include <thread>

#include "constrain_test_util.h"
#include "test_util.h"

namespace llama2::test {
namespace {

using cst::ConstraintKind;

const char* const kPersonSchema = R"({
  "type": "object",
  "properties": {
    "name": {"type": "string", "maxLength": 6},
    "age": {"type": "integer", "minimum": -5, "maximum": 120},
    "tags": {"type": "array", "items": {"enum": ["a", "b c", "d\"e"]}, "maxItems": 3},
    "ok": {"type": ["boolean", "null"]},
    "score": {"type": "number", "minimum": 0, "exclusiveMaximum": 1.5}
  },
  "required": ["name", "age"]
})";

// Walks `steps` random tokens under the engine's mask and checks every token id at every step
// against the reference. Returns the text produced.
std::string check_masks(const cst::ConstraintSpec& s,
                        const std::shared_ptr<const cst::TokenVocabulary>& vocab, int steps,
                        unsigned seed) {
  const cst::Grammar g = cst::build_grammar(s, cst::ConstraintLimits());
  EarleyReference ref(g);
  const auto compiled = cst::compile_constraint(s, vocab);
  cst::GrammarMatcher m(compiled);
  std::mt19937 rng(seed);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  std::string text;
  bool at_start = true;
  for (int step = 0; step < steps; ++step) {
    m.fill_mask(mask.data());
    std::vector<int> allowed;
    for (int id = 0; id < vocab->size(); ++id) {
      bool expected;
      if (id == vocab->eos_id()) {
        expected = ref.complete();
      } else if (!vocab->usable(id)) {
        expected = false;
      } else {
        const std::string& bytes = at_start ? vocab->first_bytes(id) : vocab->bytes(id);
        const size_t len = ref.length();
        expected = !bytes.empty() && ref.push(bytes);
        if (expected) ref.pop_to(len);
      }
      if (bit(mask, id) != expected) {
        FAIL_CHECK("token " << id << " '" << vocab->bytes(id) << "' after '" << text << "' (step "
                            << step << "): engine " << bit(mask, id) << ", reference " << expected);
      }
      if (expected) allowed.push_back(id);
    }
    REQUIRE_FALSE(allowed.empty());
    int pick = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
    if (ref.complete() && std::uniform_int_distribution<int>(0, 3)(rng) == 0)
      pick = vocab->eos_id();
    if (pick == vocab->eos_id()) {
      REQUIRE(m.accept_token(pick));
      CHECK(m.is_terminated());
      break;
    }
    const std::string bytes = at_start ? vocab->first_bytes(pick) : vocab->bytes(pick);
    REQUIRE(m.accept_token(pick));
    REQUIRE(ref.push(bytes));
    text += bytes;
    at_start = false;
  }
  return text;
}

const std::vector<cst::ConstraintSpec>& mask_specs() {
  static const std::vector<cst::ConstraintSpec> specs = [] {
    std::vector<cst::ConstraintSpec> v{
        schema(kPersonSchema),
        spec(ConstraintKind::kJsonObject, ""),
        regex(R"([a-z]+( [a-z]+)*\.)"),
        regex(R"((\d{3}-)?\d{4}|x[é中文ü]{1,3}y)"),
        gbnf("root ::= expr\nexpr ::= term ((\"+\" | \"-\") term)*\n"
             "term ::= [0-9]+ | \"(\" expr \")\" | \"é\" [^a-z\\n]"),
        schema(R"({"type":"object","properties":{"a":{"type":"string","pattern":"^[A-Z][a-z]*$"},
                   "b":{"anyOf":[{"type":"integer","minimum":10,"maximum":99},{"const":"x"}]}},
                   "required":["a","b"],"additionalProperties":false})"),
    };
    // Repetitions longer than the longest token: their token tables are shared (RepeatChain).
    v.push_back(schema(R"({"type":"array","items":{"type":"string","minLength":2,"maxLength":40},
                           "maxItems":30})"));
    v.push_back(regex("[a-z ]{0,50}x{3,45}"));
    cst::ConstraintSpec choice;
    choice.kind = ConstraintKind::kChoice;
    choice.choices = {"yes", "no", "maybe later", "ok\n", "é"};
    v.push_back(choice);
    return v;
  }();
  return specs;
}

}  // namespace

TEST_CASE("constrain masks equal the Earley reference on the tiny-gqa vocabulary") {
  int spec_index = 0;
  for (const auto& s : mask_specs()) {
    for (unsigned seed = 1; seed <= 6; ++seed) {
      CAPTURE(spec_index);
      CAPTURE(seed);
      check_masks(s, tiny_vocab(), 40, seed);
    }
    ++spec_index;
  }
}

TEST_CASE("constrain masks equal the Earley reference on the docs-8m vocabulary") {
  int spec_index = 0;
  for (const auto& s : mask_specs()) {
    CAPTURE(spec_index++);
    check_masks(s, docs_vocab(), 25, 7);
  }
}

TEST_CASE("constrain token bytes are what SentencePiece's decode renders") {
  const Tokenizer tok(std::string(LLAMA2_SOURCE_DIR) + "/models/docs-8m/tokenizer.model");
  const auto vocab = docs_vocab();
  std::mt19937 rng(3);
  std::vector<int> normal;
  for (int id = 0; id < tok.vocab_size(); ++id) {
    if (!vocab->usable(id) || tok.is_byte(id)) continue;
    normal.push_back(id);
    CHECK(vocab->bytes(id) == tok.continuation(id));
    CHECK(vocab->first_bytes(id) == tok.decode({id}));
  }
  CHECK_FALSE(vocab->usable(tok.eos_id()));
  CHECK_FALSE(vocab->usable(tok.bos_id()));
  CHECK_FALSE(vocab->usable(tok.unk_id()));
  // Sequences mixing normal pieces and byte pieces of whole characters decode to the bytes the
  // matcher feeds the grammar: first_bytes of the first token, bytes of the rest.
  const std::vector<std::vector<int>> chars = {tok.encode("中", false), tok.encode("é", false)};
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int> ids;
    std::string expected;
    for (int k = 0; k < 6; ++k) {
      if (k % 3 == 2) {
        std::string ch = k % 2 ? "\xC3\xA9" : "\xE4\xB8\xAD";  // é, 中 as byte pieces
        for (char c : ch) {
          const int id = 3 + static_cast<unsigned char>(c);  // <0x00> is id 3
          REQUIRE(tok.is_byte(id));
          ids.push_back(id);
          expected += vocab->bytes(id);
        }
        continue;
      }
      const int id = normal[std::uniform_int_distribution<size_t>(0, normal.size() - 1)(rng)];
      expected += ids.empty() ? vocab->first_bytes(id) : vocab->bytes(id);
      ids.push_back(id);
    }
    CHECK(tok.decode(ids) == expected);
  }
  (void)chars;
}

TEST_CASE("constrain first token: the dummy-prefix space is dropped, an empty piece refused") {
  const auto vocab = docs_vocab();
  const auto g = cst::compile_constraint(regex("[a-z]+"), vocab);
  cst::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  m.fill_mask(mask.data());
  int space_digit = -1, bare_space = -1;
  for (int id = 0; id < vocab->size(); ++id) {
    if (!vocab->usable(id)) continue;
    if (vocab->bytes(id) == " the") space_digit = id;
    if (vocab->bytes(id) == " " && vocab->first_bytes(id).empty()) bare_space = id;
  }
  REQUIRE(space_digit >= 0);
  CHECK(bit(mask, space_digit));  // "▁the" first: decodes to "the"
  if (bare_space >= 0) CHECK_FALSE(bit(mask, bare_space));
  REQUIRE(m.accept_token(space_digit));
  m.fill_mask(mask.data());
  CHECK_FALSE(bit(mask, space_digit));  // later, "▁the" adds " the": no space allowed
  CHECK(bit(mask, vocab->eos_id()));
}

TEST_CASE("constrain byte-fallback pieces build a multi-byte character one byte at a time") {
  const auto vocab = tiny_vocab();
  const auto g = cst::compile_constraint(regex("中+"), vocab);
  cst::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  const std::string ch = "\xE4\xB8\xAD";
  for (int round = 0; round < 2; ++round) {
    for (char c : ch) {
      m.fill_mask(mask.data());
      int allowed = 0, byte_id = -1;
      for (int id = 0; id < vocab->size(); ++id) {
        if (!bit(mask, id)) continue;
        ++allowed;
        if (vocab->bytes(id) == std::string(1, c)) byte_id = id;
      }
      REQUIRE(byte_id >= 0);
      CHECK(allowed >= 1);
      CHECK(m.is_accepting() == (round > 0 && c == ch[0]));  // only between characters
      REQUIRE(m.accept_token(byte_id));
    }
    CHECK(m.is_accepting());
  }
  CHECK(m.accept_token(vocab->eos_id()));
}

TEST_CASE("constrain EOS only where the grammar accepts; disallowed tokens change nothing") {
  const auto vocab = tiny_vocab();
  const auto g = cst::compile_constraint(regex("ab|abc"), vocab);
  cst::GrammarMatcher m(g);
  CHECK_FALSE(m.accept_token(vocab->eos_id()));
  REQUIRE(m.accept_bytes("ab"));
  CHECK(m.is_accepting());
  CHECK_FALSE(m.accept_bytes("x"));
  CHECK(m.steps() == 1);
  REQUIRE(m.accept_bytes("c"));
  CHECK(m.is_accepting());
  CHECK_FALSE(m.accept_bytes("c"));
  REQUIRE(m.accept_token(vocab->eos_id()));
  CHECK(m.is_terminated());
  CHECK_FALSE(m.accept_bytes("a"));
}

TEST_CASE("constrain rollback restores the exact earlier masks") {
  const auto vocab = docs_vocab();
  const auto g = cst::compile_constraint(schema(kPersonSchema), vocab);
  cst::GrammarMatcher m(g);
  std::mt19937 rng(11);
  std::vector<std::vector<uint32_t>> masks;
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
  for (int step = 0; step < 12; ++step) {
    m.fill_mask(mask.data());
    masks.push_back(mask);
    std::vector<int> allowed;
    for (int id = 0; id < vocab->size(); ++id)
      if (bit(mask, id) && id != vocab->eos_id()) allowed.push_back(id);
    REQUIRE_FALSE(allowed.empty());
    REQUIRE(
        m.accept_token(allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)]));
  }
  for (int back : {3, 4, 5}) {
    m.rollback(back);
    m.fill_mask(mask.data());
    CHECK(mask == masks[static_cast<size_t>(m.steps())]);
  }
  CHECK(m.steps() == 0);
  CHECK(error_of([&] { m.rollback(1); }).find("rollback of 1 steps") != std::string::npos);
}

TEST_CASE("constrain grammar cache: hits by text, bounded, failures not cached") {
  cst::GrammarCache cache(tiny_vocab(), 2);
  const auto a1 = cache.get(regex("a+"));
  const auto a2 = cache.get(regex("a+"));
  CHECK(a1 == a2);
  CHECK(cache.hits() == 1);
  cache.get(regex("b+"));
  cache.get(regex("c+"));  // evicts a+, the least recently used
  CHECK(cache.size() == 2);
  CHECK(cache.get(regex("a+")) != a1);
  cst::ConstraintSpec other_ws = schema("{}");
  other_ws.whitespace = cst::JsonWhitespace::kNone;
  CHECK(cache.get(schema("{}")) != cache.get(other_ws));
  CHECK_THROWS_AS(cache.get(regex("(a")), cst::ConstraintError);
  CHECK(cache.size() == 2);
}

}  // namespace llama2::test

namespace llama2::test {

TEST_CASE("constrain one compiled grammar serves several threads: same masks as alone") {
  const auto vocab = docs_vocab();
  const auto spec_ = schema(kPersonSchema);
  // Reference: one thread, a fresh grammar, fixed token choices (the lowest allowed id that is
  // not EOS), the masks recorded.
  auto walk = [&](const std::shared_ptr<const cst::CompiledGrammar>& g, int offset) {
    cst::GrammarMatcher m(g);
    std::vector<std::vector<uint32_t>> masks;
    std::vector<uint32_t> mask(static_cast<size_t>(vocab->mask_words()));
    for (int step = 0; step < 30; ++step) {
      m.fill_mask(mask.data());
      masks.push_back(mask);
      std::vector<int> allowed;
      for (int id = 0; id < vocab->size(); ++id)
        if (bit(mask, id) && id != vocab->eos_id()) allowed.push_back(id);
      if (allowed.empty()) break;
      REQUIRE(m.accept_token(allowed[static_cast<size_t>(offset + step) % allowed.size()]));
    }
    return masks;
  };
  std::vector<std::vector<std::vector<uint32_t>>> expected;
  for (int t = 0; t < 4; ++t) expected.push_back(walk(cst::compile_constraint(spec_, vocab), t));
  const auto shared = cst::compile_constraint(spec_, vocab);
  std::vector<std::vector<std::vector<uint32_t>>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] { got[static_cast<size_t>(t)] = walk(shared, t); });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t)
    CHECK(got[static_cast<size_t>(t)] == expected[static_cast<size_t>(t)]);
}

}  // namespace llama2::test
