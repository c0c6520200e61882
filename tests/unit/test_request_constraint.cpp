// Constrained output as a request carries it (coordinator/requests/request_constraint.h): the
// socket/batch fields, the HTTP front's OpenAI / vLLM / llama.cpp fields
// (coordinator/http/structured_fields.h), compilation errors, and the scheduler's use of it
// without an engine: the plan's mask rows, the matcher advanced by apply(), the end at a complete
// output. The engine's masking itself is checked by logits_adjust.np{1,2,4}; the whole path by
// constrain.serve.*.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/http/openai_api.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"

namespace {

using llama2::ApiKind;
using llama2::RequestConstraint;
using llama2::constrain::ConstraintKind;
using nlohmann::json;

const llama2::Tokenizer& tokenizer() {
  static const llama2::Tokenizer tok(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa/tokenizer.model");
  return tok;
}

llama2::ModelConfig config() {
  return llama2::load_model_config(LLAMA2_SOURCE_DIR "/tests/models/tiny-gqa");
}

std::string error_of(const json& obj) {
  try {
    llama2::parse_constraint_fields(obj);
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "";
}

llama2::ApiParse http(const json& extra, ApiKind kind = ApiKind::kChat) {
  json body = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "Hi"}}}}};
  if (kind == ApiKind::kCompletion) body = {{"model", "tiny"}, {"prompt", "Hi"}};
  body.update(extra);
  llama2::ApiContext c;
  c.served_models = {"tiny"};
  c.config = config();
  return llama2::parse_api_request(body.dump(), kind, c);
}

const json kSchema = {
    {"type", "object"}, {"properties", {{"a", {{"type", "integer"}}}}}, {"required", {"a"}}};

}  // namespace

TEST_CASE("constraint fields: each key becomes its typed spec") {
  auto c = llama2::parse_constraint_fields(
      {{"response_format",
        {{"type", "json_schema"}, {"json_schema", {{"name", "n"}, {"schema", kSchema}}}}}});
  REQUIRE(c != nullptr);
  CHECK(c->spec.kind == ConstraintKind::kJsonSchema);
  CHECK(json::parse(c->spec.text) == kSchema);
  CHECK(c->field == "response_format");
  c = llama2::parse_constraint_fields({{"response_format", {{"type", "json_object"}}}});
  CHECK(c->spec.kind == ConstraintKind::kJsonObject);
  CHECK(llama2::parse_constraint_fields({{"response_format", {{"type", "text"}}}}) == nullptr);
  CHECK(llama2::parse_constraint_fields({{"prompt", "x"}}) == nullptr);
  c = llama2::parse_constraint_fields({{"regex", "[ab]+"}});
  CHECK((c->spec.kind == ConstraintKind::kRegex && c->spec.text == "[ab]+"));
  c = llama2::parse_constraint_fields({{"choice", {"yes", "no"}}});
  CHECK((c->spec.kind == ConstraintKind::kChoice && c->spec.choices.size() == 2));
  c = llama2::parse_constraint_fields({{"grammar", "root ::= \"a\""}});
  CHECK(c->spec.kind == ConstraintKind::kGbnf);
  // Round trip through the replica wire's form.
  for (const json& obj :
       {json{{"regex", "x+"}}, json{{"choice", {"a", "b"}}}, json{{"grammar", "root ::= \"a\""}},
        json{{"response_format", {{"type", "json_object"}}}}}) {
    json back = json::object();
    llama2::constraint_to_json(*llama2::parse_constraint_fields(obj), &back);
    CHECK(back == obj);
  }
}

TEST_CASE("constraint fields: malformed or doubled keys are refused by name") {
  CHECK(error_of({{"regex", "a"}, {"choice", {"a"}}}) ==
        "\"regex\" and \"choice\" both constrain the output: give at most one");
  CHECK(error_of({{"response_format", {{"type", "xml"}}}}) ==
        "\"response_format\" type \"xml\" is not one of: text, json_object, json_schema");
  CHECK(error_of({{"response_format", "json"}}).find("\"response_format\" must be") == 0);
  CHECK(error_of({{"response_format", {{"type", "json_schema"}}}}).find("needs \"json_schema\"") !=
        std::string::npos);
  CHECK(error_of({{"choice", json::array()}}) == "\"choice\" must be a non-empty array of strings");
  CHECK(error_of({{"choice", {"a", 3}}}) == "\"choice\" entry 3 is not a string");
  CHECK(error_of({{"grammar", 5}}) == "\"grammar\" must be a string");
}

TEST_CASE("request fields: constraint keys are request keys; ignore_eos is refused beside them") {
  const llama2::SamplingParams defaults;
  llama2::ParsedRequest r =
      llama2::parse_request_fields({{"prompt", "x"}, {"regex", "a+"}}, defaults, config(), {});
  REQUIRE(r.ok());
  REQUIRE(r.constraint != nullptr);
  r = llama2::parse_request_fields({{"prompt", "x"}, {"regex", "a+"}, {"ignore_eos", true}},
                                   defaults, config(), {});
  CHECK(
      r.error_message ==
      "\"ignore_eos\" cannot be true with \"regex\": the constraint decides where the output ends");
  r = llama2::parse_request_fields({{"prompt", "x"}, {"regex", 1}}, defaults, config(), {});
  CHECK(r.error_message == "\"regex\" must be a string");
}

TEST_CASE("compilation: errors name the field and the keyword; the cache compiles once") {
  llama2::ConstraintCompiler compiler(tokenizer());
  RequestConstraint c;
  c.field = "response_format";
  c.spec.kind = ConstraintKind::kJsonSchema;
  c.spec.text = R"({"type": "integer", "not": {"const": 3}})";
  const auto bad = compiler.compile(c);
  REQUIRE(bad);
  CHECK(bad->code == llama2::ErrorCode::kInvalidRequest);
  CHECK(bad->message.find("\"response_format\": ") == 0);
  CHECK(bad->message.find("not") != std::string::npos);
  c.spec.text = kSchema.dump();
  CHECK(!compiler.compile(c));
  CHECK(c.grammar != nullptr);
  RequestConstraint again = c;
  again.grammar = nullptr;
  CHECK(!compiler.compile(again));
  CHECK(again.grammar == c.grammar);
  CHECK(compiler.cache().hits() == 1);
}

TEST_CASE("HTTP: OpenAI, vLLM and llama.cpp fields reach the one constraint") {
  auto kind_of = [](const llama2::ApiParse& p) {
    REQUIRE(!p.error);
    REQUIRE(p.request.request.constraint != nullptr);
    return p.request.request.constraint->spec.kind;
  };
  CHECK(kind_of(
            http({{"response_format",
                   {{"type", "json_schema"},
                    {"json_schema", {{"name", "x"}, {"schema", kSchema}, {"strict", true}}}}}})) ==
        ConstraintKind::kJsonSchema);
  CHECK(kind_of(http({{"response_format", {{"type", "json_object"}}}})) ==
        ConstraintKind::kJsonObject);
  CHECK(kind_of(http({{"guided_json", kSchema}})) == ConstraintKind::kJsonSchema);
  CHECK(kind_of(http({{"guided_json", kSchema.dump()}})) == ConstraintKind::kJsonSchema);
  CHECK(kind_of(http({{"guided_regex", "a+"}}, ApiKind::kCompletion)) == ConstraintKind::kRegex);
  CHECK(kind_of(http({{"guided_choice", {"a", "b"}}})) == ConstraintKind::kChoice);
  CHECK(kind_of(http({{"guided_grammar", "root ::= \"a\""}})) == ConstraintKind::kGbnf);
  CHECK(kind_of(http({{"grammar", "root ::= \"a\""}})) == ConstraintKind::kGbnf);
  CHECK(kind_of(http({{"json_schema", kSchema}})) == ConstraintKind::kJsonSchema);
  CHECK(kind_of(http({{"structured_outputs", {{"choice", {"a"}}}}})) == ConstraintKind::kChoice);
  CHECK(kind_of(http({{"structured_outputs", {{"json", kSchema}}}})) ==
        ConstraintKind::kJsonSchema);
  CHECK(kind_of(http({{"structured_outputs", {{"json_object", true}}}})) ==
        ConstraintKind::kJsonObject);
  CHECK(kind_of(http({{"response_format", {{"type", "text"}}}, {"guided_regex", "a"}})) ==
        ConstraintKind::kRegex);
  CHECK(http({{"response_format", {{"type", "text"}}}}).request.request.constraint == nullptr);
  CHECK(http(json::object()).request.request.constraint == nullptr);
}

TEST_CASE("HTTP: conflicting or malformed structured fields are a 400 naming the key") {
  llama2::ApiParse p = http({{"guided_regex", "a"}, {"guided_choice", {"a"}}});
  REQUIRE(p.error);
  CHECK(p.error->status == 400);
  CHECK(p.error->message ==
        "\"guided_regex\" and \"guided_choice\" both constrain the output: give at most one");
  p = http({{"guided_json", "{not json"}});
  REQUIRE(p.error);
  CHECK(p.error->message == "\"guided_json\" is not valid JSON");
  p = http({{"structured_outputs", {{"xml", "a"}}}});
  REQUIRE(p.error);
  CHECK(p.error->param == "structured_outputs.xml");
  p = http({{"response_format", {{"type", "json_schema"}}}});
  REQUIRE(p.error);
  CHECK(p.error->message.find("needs \"json_schema\"") != std::string::npos);
}

namespace {

// Greedy under the plan's masks, as the engine applies them: row r's logits are a fixed random
// draw per (step, token), disallowed tokens at -inf; the best allowed token comes back (full rows).
llama2::StepLogits masked_rows(const llama2::StepPlan& plan, int vocab, std::mt19937& rng) {
  llama2::StepLogits l;
  l.rows = plan.logit_rows();
  l.width = vocab;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int r = 0; r < l.rows; ++r) {
    const llama2::RowAdjust* adj = nullptr;
    for (const auto& a : plan.adjust) adj = a.row == r ? &a : adj;
    for (int id = 0; id < vocab; ++id) {
      bool allowed = true;
      if (adj != nullptr && adj->mask_begin >= 0) {
        const uint32_t w = plan.mask_words[static_cast<size_t>(adj->mask_begin + id / 32)];
        allowed = (w >> (id % 32)) & 1u;
      }
      l.values.push_back(allowed ? u(rng) : -std::numeric_limits<float>::infinity());
    }
  }
  return l;
}

struct Events final : llama2::SchedulerEvents {
  std::vector<llama2::Finished> finished;
  void on_token(const llama2::TokenEvent&) override {}
  void on_finished(llama2::Finished&& done) override { finished.push_back(std::move(done)); }
};

}  // namespace

TEST_CASE("scheduler: constrained rows get masks; outputs match; complete outputs stop") {
  const llama2::ModelConfig cfg = config();
  llama2::BlockAllocator blocks(64, 16);
  llama2::SchedulerOptions opts;
  opts.full_logits = true;
  llama2::BatchScheduler sched(tokenizer(), cfg, blocks, opts);
  llama2::ConstraintCompiler compiler(tokenizer());
  const std::string re = "[a-c]{1,6}-[0-9]{2}";
  auto c = std::make_shared<RequestConstraint>();
  c->spec.kind = ConstraintKind::kRegex;
  c->spec.text = re;
  c->field = "regex";
  REQUIRE(!compiler.compile(*c));
  for (int64_t id = 0; id < 2; ++id) {  // request 1 unconstrained
    llama2::SubmitRequest req;
    req.id = id;
    req.prompt = {1, 50, 60};
    req.params.temperature = 0;
    req.params.max_new_tokens = 40;
    if (id == 0) req.constraint = c;
    REQUIRE(sched.try_admit(req));
  }
  Events ev;
  std::mt19937 rng(36);
  for (int step = 0; step < 60 && !sched.idle(); ++step) {
    const llama2::ScheduledStep s = sched.schedule();
    // Only request 0's row is adjusted, and only with a mask.
    for (const auto& a : s.plan.adjust) {
      int row = 0;
      for (size_t i = 0; i < s.plan.seqs.size() && i < s.ids.size(); ++i) {
        if (row == a.row) CHECK(s.ids[i] == 0);
        row += s.plan.seqs[i].n_logits;
      }
      CHECK(a.mask_begin >= 0);
    }
    sched.apply(s, masked_rows(s.plan, cfg.vocab_size, rng), ev);
  }
  REQUIRE(ev.finished.size() == 2);
  for (const auto& f : ev.finished) {
    if (f.id != 0) continue;
    CHECK(f.finish_reason == llama2::FinishReason::kStop);
    CHECK(std::regex_match(f.text, std::regex(re)));
    INFO(f.text);
  }
}

TEST_CASE("scheduler: min_tokens and logit_bias combine with a constraint in one VocabAdjust") {
  const llama2::ModelConfig cfg = config();
  llama2::BlockAllocator blocks(64, 16);
  llama2::BatchScheduler sched(tokenizer(), cfg, blocks, llama2::SchedulerOptions{});
  llama2::ConstraintCompiler compiler(tokenizer());
  auto c = std::make_shared<RequestConstraint>();
  c->spec.kind = ConstraintKind::kRegex;
  c->spec.text = "[a-z]{1,6}";
  c->field = "regex";
  REQUIRE(!compiler.compile(*c));
  // Request 0: the constraint, min_tokens with every even id as a stop id, one bias. Request 1:
  // the constraint alone, whose row shows the grammar's own mask at the same state.
  std::vector<int32_t> even;
  for (int32_t id = 0; id < cfg.vocab_size; id += 2) even.push_back(id);
  for (int64_t id = 0; id < 2; ++id) {
    llama2::SubmitRequest req;
    req.id = id;
    req.prompt = {1, 50, 60};
    req.params.temperature = 0;
    req.params.max_new_tokens = 8;
    if (id == 0) {
      req.params.min_tokens = 4;
      req.params.stop_token_ids = even;
      req.params.logit_bias = {{5, -3.0f}};
    }
    req.constraint = c;
    REQUIRE(sched.try_admit(req));
  }
  const llama2::ScheduledStep s = sched.schedule();
  REQUIRE(s.plan.adjust.size() == 2);
  const llama2::RowAdjust& both = s.plan.adjust[0];
  const llama2::RowAdjust& grammar = s.plan.adjust[1];
  REQUIRE(both.mask_begin >= 0);
  REQUIRE(grammar.mask_begin >= 0);
  CHECK(both.bias_count == 1);
  CHECK(s.plan.bias_ids[static_cast<size_t>(both.bias_begin)] == 5);
  CHECK(grammar.bias_count == 0);
  // Row 0's mask is the grammar's with the even ids cleared (the stop ids of min_tokens).
  const auto words = static_cast<size_t>(s.plan.mask_words_per_row);
  bool any = false;
  for (size_t w = 0; w < words; ++w) {
    const uint32_t g = s.plan.mask_words[static_cast<size_t>(grammar.mask_begin) + w];
    CHECK(s.plan.mask_words[static_cast<size_t>(both.mask_begin) + w] == (g & 0xAAAAAAAAu));
    any = any || (g & 0xAAAAAAAAu) != 0;
  }
  CHECK(any);  // the regex allows odd ids too: the combined mask is not the fallback
}
