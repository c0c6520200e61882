// Constraint engine cost on rank 0 (src/coordinator/constrain/): the time of fill_mask per token
// for JSON schemas over a 32,000-piece SentencePiece vocabulary, and the compile time of a
// 50-property schema. Targets (issue 36): mask p50 <= 20 us, p99 <= 100 us; compile <= 50 ms.
//
// Each schema runs `--sequences` random generations under its mask (seeded; a random allowed
// token each step, closing strings early as a model would, EOS as soon as it is allowed). The
// first sequence of a schema pays for its token tables (computed on first use of each grammar
// position and then shared by every sequence of that grammar): its masks are reported apart as
// "cold", the others as "warm". Before timing anything, each finished sequence is checked to
// parse as JSON (nlohmann), so a wrong mask cannot make the numbers look good.
//
//   benchmarks/cpu/constrain_tokenizer.sh                  # build/constrain/tokenizer-32k.model
//   cmake --build build --target llama2_bench_constrain
//   build/llama2_bench_constrain --tokenizer build/constrain/tokenizer-32k.model
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "coordinator/constrain/constraint.h"
#include "coordinator/constrain/matcher.h"
#include "coordinator/text/tokenizer.h"

namespace {

namespace cst = llama2::constrain;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

// This thread's CPU time in microseconds. Masks are timed with it as well as with the wall
// clock: on a shared machine a preempted call reads milliseconds of wall time it did not use.
double thread_cpu_us() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e6 + static_cast<double>(ts.tv_nsec) / 1e3;
}

std::string fifty_properties() {
  std::string props, req;
  const char* types[] = {R"({"type":"string","maxLength":40})",
                         R"({"type":"integer","minimum":0})",
                         R"({"type":"number","minimum":-1000,"maximum":1000})",
                         R"({"type":"boolean"})",
                         R"({"enum":["low","medium","high"]})",
                         R"({"type":"array","items":{"type":"string"},"maxItems":5})",
                         R"({"type":["string","null"]})"};
  for (int i = 0; i < 50; ++i) {
    const std::string name = "field_" + std::to_string(i);
    props += (i ? "," : "") + ("\"" + name + "\":") + types[i % 7];
    req += (i ? "," : "") + ("\"" + name + "\"");
  }
  return R"({"type":"object","properties":{)" + props + R"(},"required":[)" + req +
         R"(],"additionalProperties":false})";
}

std::vector<std::pair<std::string, std::string>> schemas() {
  return {
      {"person", R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer",
        "minimum":0,"maximum":150},"email":{"type":"string","maxLength":64},"tags":{"type":"array",
        "items":{"type":"string"},"maxItems":4}},"required":["name","age"]})"},
      {"tool_call", R"({"type":"object","properties":{"name":{"const":"get_weather"},"arguments":{
        "type":"object","properties":{"city":{"type":"string"},"unit":{"enum":["celsius",
        "fahrenheit"]},"days":{"type":"integer","minimum":1,"maximum":14}},"required":["city",
        "unit","days"],"additionalProperties":false}},"required":["name","arguments"]})"},
      {"order_defs", R"({"$defs":{"Item":{"type":"object","properties":{"sku":{"type":"string",
        "pattern":"^[A-Z]{3}-[0-9]{4}$"},"qty":{"type":"integer","minimum":1},"price":{"type":
        "number","minimum":0}},"required":["sku","qty","price"]}},"type":"object","properties":{
        "id":{"type":"string"},"items":{"type":"array","items":{"$ref":"#/$defs/Item"},"minItems":1,
        "maxItems":5},"note":{"anyOf":[{"type":"string"},{"type":"null"}]}},"required":["id","items"]})"},
      {"json_object", ""},
      {"fifty_properties", fifty_properties()},
  };
}

// JSON by RFC 8259: nlohmann refuses numbers beyond a double's range (406), which JSON allows.
bool is_json(const std::string& text) {
  try {
    (void)nlohmann::json::parse(text).is_null();
    return true;
  } catch (const nlohmann::json::out_of_range&) {
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

struct Percentiles {
  double p50 = 0, p99 = 0, max = 0;
  size_t n = 0;
};

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.n = v.size();
  p.p50 = v[v.size() / 2];
  p.p99 = v[std::min(v.size() - 1, v.size() * 99 / 100)];
  p.max = v.back();
  return p;
}

// One generation under the mask; appends each fill_mask time to `times`. Returns the text, or
// "" when it hit `max_tokens` first.
struct Times {
  std::vector<double> wall, cpu;
};

std::string generate(const std::shared_ptr<const cst::CompiledGrammar>& g, std::mt19937& rng,
                     int max_tokens, Times& times) {
  const cst::TokenVocabulary& vocab = g->vocabulary();
  cst::GrammarMatcher m(g);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab.mask_words()));
  std::string text;
  std::vector<int> allowed, closing;
  for (int step = 0; step < max_tokens; ++step) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_us();
    m.fill_mask(mask.data());
    times.cpu.push_back(thread_cpu_us() - c0);
    times.wall.push_back(us_since(t0));
    allowed.clear();
    closing.clear();
    for (int id = 0; id < vocab.size(); ++id) {
      if (!((mask[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u)) continue;
      allowed.push_back(id);
      if (vocab.bytes(id).find_first_of("\"}],") != std::string::npos) closing.push_back(id);
    }
    if (allowed.empty()) throw llama2::Error("empty mask after '" + text + "'");
    if (m.is_accepting()) return text;  // EOS as soon as allowed
    const std::vector<int>& pool =
        allowed.size() > 500 && !closing.empty() && rng() % 4 != 0 ? closing : allowed;
    const int id = pool[std::uniform_int_distribution<size_t>(0, pool.size() - 1)(rng)];
    text += step == 0 ? vocab.first_bytes(id) : vocab.bytes(id);
    if (!m.accept_token(id)) throw llama2::Error("an allowed token was refused");
  }
  return "";
}

// One schema's row of the table: compile, then `sequences` generations; the first one's masks
// are "cold", the others' "warm" (added to `all_warm`). False when an output is not JSON.
bool run_schema(const std::string& name, const std::string& text,
                const std::shared_ptr<const cst::TokenVocabulary>& vocab, int sequences,
                int max_tokens, Times& all_warm) {
  cst::ConstraintSpec spec;
  spec.kind = text.empty() ? cst::ConstraintKind::kJsonObject : cst::ConstraintKind::kJsonSchema;
  spec.text = text;
  const auto t0 = Clock::now();
  const auto g = cst::compile_constraint(spec, vocab);
  const double compile_ms = us_since(t0) / 1000;
  std::mt19937 rng(36);
  Times cold, warm;
  for (int s = 0; s < sequences; ++s) {
    const std::string out = generate(g, rng, max_tokens, s == 0 ? cold : warm);
    if (!out.empty() && !is_json(out)) {
      std::fprintf(stderr, "%s: output is not JSON: %s\n", name.c_str(), out.c_str());
      return false;
    }
  }
  const Percentiles c = percentiles(cold.cpu), w = percentiles(warm.cpu);
  const Percentiles ww = percentiles(warm.wall);
  all_warm.cpu.insert(all_warm.cpu.end(), warm.cpu.begin(), warm.cpu.end());
  all_warm.wall.insert(all_warm.wall.end(), warm.wall.begin(), warm.wall.end());
  std::printf(
      "| %s | %.2f | %.1f / %.1f / %.0f | %.2f / %.1f / %.0f | %zu | %.2f / %.1f | %.1f |\n",
      name.c_str(), compile_ms, c.p50, c.p99, c.max, w.p50, w.p99, w.max, w.n, ww.p50, ww.p99,
      static_cast<double>(g->table_bytes()) / 1e6);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path;
  int sequences = 40, max_tokens = 400;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) tokenizer_path = argv[i + 1];
    if (!std::strcmp(argv[i], "--sequences")) sequences = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--max-tokens")) max_tokens = std::atoi(argv[i + 1]);
  }
  if (tokenizer_path.empty()) {
    std::fprintf(stderr, "usage: llama2_bench_constrain --tokenizer MODEL [--sequences N]\n");
    return 2;
  }
  const llama2::Tokenizer tok(tokenizer_path);
  auto t0 = Clock::now();
  const auto vocab = cst::TokenVocabulary::from_tokenizer(tok);
  std::printf("vocabulary: %d pieces (token bytes and tries) built in %.1f ms\n\n", vocab->size(),
              us_since(t0) / 1000);
  std::printf("Mask times in us of thread CPU time (wall clock in the last columns).\n");
  std::printf(
      "| schema | compile ms | cold p50 / p99 / max | warm p50 / p99 / max | warm n | "
      "warm wall p50 / p99 | tables MB |\n|---|---|---|---|---|---|---|\n");
  Times all_warm;
  for (const auto& [name, text] : schemas()) {
    if (!run_schema(name, text, vocab, sequences, max_tokens, all_warm)) return 1;
  }
  const Percentiles w = percentiles(all_warm.cpu), ww = percentiles(all_warm.wall);
  std::printf("\nall warm masks, thread CPU: p50 %.2f us, p99 %.1f us, max %.0f us (n %zu)\n",
              w.p50, w.p99, w.max, w.n);
  std::printf("all warm masks, wall clock: p50 %.2f us, p99 %.1f us, max %.0f us\n", ww.p50, ww.p99,
              ww.max);
  std::vector<double> compiles;
  cst::ConstraintSpec fifty;
  fifty.text = fifty_properties();
  for (int i = 0; i < 20; ++i) {
    t0 = Clock::now();
    (void)cst::compile_constraint(fifty, vocab);
    compiles.push_back(us_since(t0) / 1000);
  }
  const Percentiles c = percentiles(compiles);
  std::printf("50-property schema compile: median %.2f ms, max %.2f ms (20 runs)\n", c.p50, c.max);
  return 0;
}
