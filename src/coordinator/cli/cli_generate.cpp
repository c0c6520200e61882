// `llama2 generate`: one prompt through the tensor-parallel engine, text streamed to stdout.
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>

#include "common/check.h"
#include "common/model_config.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "coordinator/cli/session.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/text/tokenizer.h"

namespace llama2 {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> parse_token_list(const std::string& s, int vocab) {
  std::vector<int> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    long v = -1;
    try {
      v = std::stol(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size()) {
      throw Error("--prompt-tokens: '" + item + "' is not an integer token id");
    }
    if (v < 0 || v >= vocab) {
      throw Error("--prompt-tokens: token id " + item + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) throw Error("--prompt-tokens: no token ids given");
  return ids;
}

std::string read_file(const std::string& path, const char* flag = "--prompt-file") {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(std::string(flag) + ": cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

cxxopts::Options generate_options() {
  cxxopts::Options opts("llama2 generate",
                        "Generate text for one prompt. Run under mpirun: one rank per GPU "
                        "(or per tensor-parallel CPU shard).");
  opts.add_options()("p,prompt", "Prompt text (BOS is added)", cxxopts::value<std::string>())(
      "prompt-file", "Read the prompt text from a file", cxxopts::value<std::string>())(
      "prompt-tokens", "Prompt as comma-separated token ids, used as given",
      cxxopts::value<std::string>())(
      "json", "Print one JSON object (ids, text, finish reason, timings) instead of streaming")(
      "json-schema", "Constrain the output to JSON valid under the JSON Schema in FILE",
      cxxopts::value<std::string>(),
      "FILE")("regex", "Constrain the output to match the regular expression RE in full",
              cxxopts::value<std::string>(), "RE")(
      "grammar", "Constrain the output to the GBNF grammar in FILE (llama.cpp's syntax)",
      cxxopts::value<std::string>(), "FILE");
  add_engine_options(opts);
  add_deterministic_option(opts);
  add_sampling_options(opts);
  add_speculative_options(opts);
  add_generation_config_option(opts);
  return opts;
}

// The prompt as token ids: --prompt-tokens as given, else the text tokenized with BOS.
std::vector<int> read_prompt(const cxxopts::ParseResult& args, const ModelConfig& model,
                             const Tokenizer& tok) {
  if (args.count("prompt-tokens")) {
    return parse_token_list(args["prompt-tokens"].as<std::string>(), model.vocab_size);
  }
  const std::string text = args.count("prompt") ? args["prompt"].as<std::string>()
                                                : read_file(args["prompt-file"].as<std::string>());
  return tok.encode(text, /*add_bos=*/true);
}

// --json-schema FILE, --regex RE or --grammar FILE (at most one), compiled over the tokenizer's
// vocabulary; null when none is given. Error naming the flag and the compiler's message (the
// keyword, rule or limit) when it does not compile.
std::shared_ptr<const RequestConstraint> read_constraint(const cxxopts::ParseResult& args,
                                                         const Tokenizer& tok) {
  auto c = std::make_shared<RequestConstraint>();
  int given = 0;
  if (args.count("json-schema")) {
    c->field = "--json-schema";
    c->spec.kind = constrain::ConstraintKind::kJsonSchema;
    c->spec.text = read_file(args["json-schema"].as<std::string>(), "--json-schema");
    ++given;
  }
  if (args.count("regex")) {
    c->field = "--regex";
    c->spec.kind = constrain::ConstraintKind::kRegex;
    c->spec.text = args["regex"].as<std::string>();
    ++given;
  }
  if (args.count("grammar")) {
    c->field = "--grammar";
    c->spec.kind = constrain::ConstraintKind::kGbnf;
    c->spec.text = read_file(args["grammar"].as<std::string>(), "--grammar");
    ++given;
  }
  if (given == 0) return nullptr;
  if (given > 1) throw Error("give at most one of --json-schema, --regex, --grammar");
  ConstraintCompiler constraints(tok);
  if (std::optional<Refusal> bad = constraints.compile(*c)) throw Error(bad->message);
  return c;
}

// What the one request produced, and its timings.
struct Generated {
  Finished result;
  Timings timings;
};

// Runs the one request through the same request owner -> scheduler path as `serve` and `batch`,
// streaming its text to stdout unless `json_out`.
Generated generate_one(Session& session, const std::vector<int>& prompt,
                       const SamplingParams& params,
                       std::shared_ptr<const RequestConstraint> constraint, bool json_out) {
  struct Output final : RequestEvents {
    bool stream = false;
    Generated out;
    void on_token(const TokenEvent& ev) override {
      if (!stream) return;
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    void on_finished(const Finished& done, const Timings& t) override {
      out.result = done;
      out.timings = t;
    }
  } output;
  output.stream = !json_out;
  const std::unique_ptr<StepLog> step_log = StepLog::open(session.settings.knobs.step_log);
  LocalServing serving(*session.engine, *session.tokenizer, session.config, session.num_blocks,
                       session.block_size, scheduler_options(session.settings), output, nullptr, {},
                       step_log.get());
  if (std::optional<Refusal> refusal =
          serving.submit(SubmitRequest{0, prompt, params, *params.seed, std::move(constraint)})) {
    session.engine->shutdown(1);  // the workers wait for a plan: release them before reporting
    throw ReportedError(refusal->message);
  }
  while (!serving.owner.idle()) serving.owner.step();
  return output.out;
}

void report(const Generated& g, const std::vector<int>& prompt, const RankEngine& engine,
            const SamplingParams& params, double load_s, double gen_s, bool json_out, bool quiet) {
  const Finished& result = g.result;
  const double decode_s = gen_s - g.timings.ttft_s;
  const size_t n_out = result.tokens.size();
  const double decode_tps = n_out > 1 && decode_s > 0 ? (n_out - 1) / decode_s : 0.0;
  if (json_out) {
    nlohmann::json j{{"prompt_token_ids", prompt},
                     {"token_ids", result.tokens},
                     {"text", result.text},
                     {"finish_reason", to_string(result.finish_reason)},
                     {"seed", *params.seed},
                     {"backend", engine.backend_name()},
                     {"ranks", engine.shard().tp},
                     {"usage", {{"prompt_tokens", prompt.size()}, {"completion_tokens", n_out}}},
                     {"timings",
                      {{"load_s", load_s},
                       {"time_to_first_token_s", g.timings.ttft_s},
                       {"generate_s", gen_s},
                       {"decode_tokens_per_s", decode_tps}}}};
    if (nlohmann::json spec = speculative_json(result); !spec.is_null()) j["speculative"] = spec;
    std::cout << j.dump() << std::endl;
    return;
  }
  std::cout << std::endl;
  if (quiet) return;
  std::fprintf(stderr,
               "[%s] %zu prompt + %zu generated tokens, finish_reason=%s, seed=%llu, "
               "TTFT %.1f ms, decode %.1f tok/s\n",
               engine.backend_name(), prompt.size(), n_out, to_string(result.finish_reason),
               static_cast<unsigned long long>(*params.seed), g.timings.ttft_s * 1e3, decode_tps);
  if (result.speculative == SpecUse::kOn) {
    std::fprintf(stderr, "speculative: %d of %d proposed tokens accepted in %d verify steps\n",
                 result.spec_accepted, result.spec_proposed, result.spec_verify_steps);
  }
}

}  // namespace

int run_generate(int argc, char** argv, int rank) {
  cxxopts::Options opts = generate_options();
  const CommandLine cl = parse_command(opts, argc, argv, {"model"}, "", rank == 0);
  if (cl.help_requested) return 0;
  require_one_of(cl, {"prompt", "prompt-file", "prompt-tokens"},
                 "give exactly one of --prompt, --prompt-file, --prompt-tokens");
  SamplingParams params = sampling_from_options(cl.args);

  SessionStart start = start_session(cl, kGenerateSteps, rank);
  std::vector<int> prompt;  // rank 0
  int kv_blocks = 0;        // rank 0: what the prompt and its new tokens need
  std::shared_ptr<const RequestConstraint> constraint;  // rank 0
  start.on_rank0([&] {
    apply_generation_config(cl.args, &start, &params);
    prompt = read_prompt(cl.args, start.model, *start.tokenizer);
    const std::string bad = validate_sampling(params, static_cast<int>(prompt.size()),
                                              start.model.max_position_embeddings);
    if (!bad.empty()) throw Error(bad);
    if (!params.seed) params.seed = random_seed();
    constraint = read_constraint(cl.args, *start.tokenizer);
    if (constraint != nullptr && params.ignore_eos)
      throw Error(
          "--ignore-eos cannot be combined with a constraint: the constraint decides "
          "where the output ends");
    kv_blocks = BlockAllocator::blocks_for(static_cast<int>(prompt.size()) + params.max_new_tokens,
                                           start.cfg.block_size);
  });
  Session session = open_engine(std::move(start), kv_blocks);
  RankEngine& engine = *session.engine;
  if (rank != 0) return engine.worker_loop();
  const bool quiet = cl.args.count("quiet") > 0, json_out = cl.args.count("json") > 0;
  if (!quiet) std::cerr << engine.startup_report() << session.notes << std::flush;

  const auto t_gen = Clock::now();
  const Generated result = generate_one(session, prompt, params, std::move(constraint), json_out);
  const double gen_s = std::chrono::duration<double>(Clock::now() - t_gen).count();
  engine.shutdown(0);
  report(result, prompt, engine, params, session.load_s, gen_s, json_out, quiet);
  return 0;
}

}  // namespace llama2
