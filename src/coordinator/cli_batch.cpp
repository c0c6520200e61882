// `llama2 batch`: a JSONL file of prompts through the engine as one job, several prompts per
// forward pass, results appended as they complete, resumable after a kill.
#include <mpi.h>

#include <fstream>
#include <iostream>
#include <random>

#include "common/check.h"
#include "coordinator/batch_io.h"
#include "coordinator/block_allocator.h"
#include "coordinator/cli_common.h"
#include "coordinator/commands.h"
#include "coordinator/request.h"
#include "coordinator/request_owner.h"
#include "coordinator/session.h"

namespace llama2 {
namespace {

using nlohmann::json;

// Exit code when the job ran but some input lines were invalid (their error lines are written).
constexpr int kExitSomeLinesFailed = 3;

struct BatchLine {
  size_t line_no = 0;
  json custom_id;  // string, or null when the line had none
  ParsedRequest req;
};

uint64_t mix_seed(uint64_t job_seed, const std::string& id) {
  // FNV-1a of the id, then a splitmix64 round: each line gets its own stream, stable across runs
  // and independent of batch composition.
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : id) h = (h ^ c) * 1099511628211ULL;
  uint64_t z = job_seed ^ h;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

json error_line(const BatchLine& b, const std::string& code, const std::string& msg) {
  return json{{"custom_id", b.custom_id},
              {"line", b.line_no},
              {"error", {{"code", code}, {"message", msg}}}};
}

cxxopts::Options batch_options() {
  cxxopts::Options opts(
      "llama2 batch",
      "Run a JSONL file of prompts as one job. Each input line: {\"custom_id\": ..., "
      "\"prompt\": \"...\" | \"prompt_tokens\": [...], optional sampling keys}. Output: "
      "one JSON line per input line, in completion order. Exit 0: all lines done; 3: "
      "some lines invalid (error lines written); 1: the job failed; 2: usage.");
  opts.add_options()("i,input", "Input JSONL file", cxxopts::value<std::string>())(
      "o,output", "Output JSONL file (appended to with --resume)", cxxopts::value<std::string>())(
      "resume",
      "Skip the input lines already answered in --output (by custom_id, else by line number) "
      "and append the rest")("max-batch-size", "Sequences decoded together per step",
                             cxxopts::value<int>()->default_value("32"))(
      "prefill-chunk", "Prompt tokens per step across sequences",
      cxxopts::value<int>()->default_value("512"))(
      "kv-cache-blocks",
      "KV blocks to allocate (default: enough for max-batch-size of the longest request)",
      cxxopts::value<int>())("progress-interval",
                             "Seconds between progress lines when stderr is not a terminal",
                             cxxopts::value<double>()->default_value("10"));
  add_engine_options(opts);
  add_sampling_options(opts);
  return opts;
}

}  // namespace

int run_batch(int argc, char** argv, int rank) {
  cxxopts::Options opts = batch_options();
  const auto args = parse_or_usage(opts, argc, argv);
  if (args.count("help")) {
    if (rank == 0) std::cout << opts.help() << std::endl;
    return 0;
  }
  for (const char* required : {"model", "input", "output"}) {
    if (!args.count(required))
      throw UsageError(std::string("--") + required + " is required", opts.help());
  }
  const int max_batch = args["max-batch-size"].as<int>();
  const int prefill_chunk = args["prefill-chunk"].as<int>();
  const double interval = args["progress-interval"].as<double>();
  const std::string out_path = args["output"].as<std::string>();
  const bool resume = args.count("resume") > 0;
  SamplingParams defaults = sampling_from_options(args);
  const uint64_t job_seed = defaults.seed.value_or(random_seed());
  defaults.seed.reset();  // per line: the line's own seed, else one derived from the job seed

  std::vector<BatchLine> lines;
  DoneLines done;
  SessionOptions sopts = session_options_from(args, opts.help());
  sopts.max_batch = std::max(1, max_batch);
  sopts.prefill_chunk = std::max(1, prefill_chunk);
  Session session = open_session(sopts, rank, [&](const ModelConfig& config, const Tokenizer& tok) {
    if (max_batch < 1)
      throw Error("--max-batch-size must be >= 1 (got " + std::to_string(max_batch) + ")");
    if (prefill_chunk < 1)
      throw Error("--prefill-chunk must be >= 1 (got " + std::to_string(prefill_chunk) + ")");
    if (!(interval > 0)) throw Error("--progress-interval must be > 0 seconds");
    // The CLI defaults must be valid on their own (a 1-token prompt stands in for any prompt).
    if (std::string bad = validate_sampling(defaults, 1, config.max_position_embeddings);
        !bad.empty()) {
      throw Error(bad);
    }
    const std::string in_path = args["input"].as<std::string>();
    std::ifstream in(in_path, std::ios::binary);
    if (!in) throw Error("--input " + in_path + ": cannot open");
    if (resume) {
      done = load_done(out_path);
    } else if (std::ifstream probe(out_path, std::ios::binary | std::ios::ate);
               probe && probe.tellg() > 0) {
      throw Error("--output " + out_path +
                  " already has results; pass --resume to continue that job "
                  "or choose another file");
    }
    std::set<std::string> seen;
    std::string text;
    int max_blocks = 1;
    // Resume keys (DoneLines): the first line with a custom_id by that id, every other line by
    // its number.
    for (size_t line_no = 1; std::getline(in, text); ++line_no) {
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      BatchLine b;
      b.line_no = line_no;
      const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
      const bool has_id = j.is_object() && j.contains("custom_id") && j["custom_id"].is_string();
      const std::string id = has_id ? j["custom_id"].get<std::string>() : std::string();
      const bool first_with_id = has_id && seen.insert(id).second;
      if (first_with_id ? done.ids.count(id) > 0 : done.lines.count(line_no) > 0) {
        continue;  // resumed: already in the output
      }
      if (j.is_discarded()) {
        b.req.error_code = "invalid_json";
        b.req.error_message = "line " + std::to_string(line_no) + " is not valid JSON";
      } else if (!has_id) {
        b.req.error_code = "invalid_request";
        b.req.error_message = "\"custom_id\" (a string) is required";
      } else if (!first_with_id) {
        b.custom_id = id;
        b.req.error_code = "duplicate_custom_id";
        b.req.error_message = "custom_id \"" + id + "\" appears more than once in the input";
      } else {
        b.custom_id = id;
        b.req = parse_request(j, defaults, tok, config, {"custom_id"});
        if (b.req.ok()) {
          if (!b.req.params.seed) b.req.params.seed = mix_seed(job_seed, id);
          max_blocks = std::max(
              max_blocks, BlockAllocator::blocks_for(
                              static_cast<int>(b.req.prompt.size()) + b.req.params.max_new_tokens,
                              sopts.block_size));
        }
      }
      lines.push_back(std::move(b));
    }
    if (args.count("kv-cache-blocks")) {
      const int blocks = args["kv-cache-blocks"].as<int>();
      if (blocks < 1)
        throw Error("--kv-cache-blocks must be >= 1 (got " + std::to_string(blocks) + ")");
      return blocks;
    }
    return max_batch * max_blocks;
  });
  RankEngine& engine = *session.engine;
  if (rank != 0) return engine.worker_loop();
  if (!args.count("quiet")) std::cerr << engine.startup_report() << std::flush;

  int code = 0;
  try {
    ResultWriter out(out_path, resume);
    Progress progress(lines.size(), interval);
    size_t finished = 0, failed = 0;
    uint64_t tokens = 0;
    // Lines go through the request owner (the data-parallel issue spreads them over replicas
    // there); each finished one is written at once, in completion order.
    struct Writer final : RequestEvents {
      ResultWriter& out;
      const std::vector<BatchLine>& lines;
      size_t& finished;
      Writer(ResultWriter& o, const std::vector<BatchLine>& l, size_t& f)
          : out(o), lines(l), finished(f) {}
      void on_finished(const Finished& r, const Timings&) override {
        const BatchLine& b = lines.at(static_cast<size_t>(r.id));
        out.write(
            json{{"custom_id", b.custom_id},
                 {"text", r.text},
                 {"token_ids", r.tokens},
                 {"finish_reason", r.finish_reason},
                 {"seed", *b.req.params.seed},
                 {"usage",
                  {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.tokens.size()}}}});
        ++finished;
      }
    } writer(out, lines, finished);
    LocalServing serving(engine, *session.tokenizer, session.config, session.num_blocks,
                         session.block_size, SchedulerOptions{max_batch, prefill_chunk}, writer);
    for (size_t i = 0; i < lines.size(); ++i) {
      const BatchLine& b = lines[i];
      if (b.req.ok()) {
        const std::optional<Refusal> refusal = serving.submit(
            SubmitRequest{static_cast<int64_t>(i), b.req.prompt, b.req.params, *b.req.params.seed});
        if (!refusal) continue;
        out.write(error_line(b, refusal->code, refusal->message));
      } else {
        out.write(error_line(b, b.req.error_code, b.req.error_message));
      }
      ++finished;
      ++failed;
    }
    while (!serving.owner.idle()) {
      tokens += static_cast<uint64_t>(serving.owner.step());
      progress.update(finished, failed, tokens);
    }
    progress.update(finished, failed, tokens, /*final=*/true);
    // Error lines of earlier runs of a resumed job count: the job as a whole had invalid lines.
    code = failed + done.errors > 0 ? kExitSomeLinesFailed : 0;
  } catch (const std::exception& e) {
    // The workers are waiting for a plan: release them before reporting.
    engine.shutdown(1);
    throw ReportedError(e.what());
  }
  engine.shutdown(code);
  return code;
}

}  // namespace llama2
