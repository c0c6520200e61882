// `llama2 batch`: a JSONL file of prompts through the engine as one job, several prompts per
// forward pass, results appended as they complete, resumable after a kill.
#include <mpi.h>

#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <optional>
#include <random>

#include "common/check.h"
#include "coordinator/cli/batch_io.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "coordinator/cli/replica_roles.h"
#include "coordinator/cli/session.h"
#include "coordinator/requests/request.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/requests/request_tools.h"
#include "coordinator/scheduler/block_allocator.h"

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

json error_line(const BatchLine& b, ErrorCode code, const std::string& msg) {
  return json{{"custom_id", b.custom_id},
              {"line", b.line_no},
              {"error", {{"code", to_string(code)}, {"message", msg}}}};
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
      "and append the rest")(
      "max-batch-size", "Sequences decoded together per step",
      cxxopts::value<int>()->default_value(std::to_string(kBatchSteps.max_batch)))(
      "prefill-chunk", "Prompt tokens per step across sequences",
      cxxopts::value<int>()->default_value(std::to_string(kBatchSteps.prefill_chunk)))(
      "kv-cache-blocks",
      "KV blocks to allocate (default: enough for max-batch-size of the longest request)",
      cxxopts::value<int>())("progress-interval",
                             "Seconds between progress lines when stderr is not a terminal",
                             cxxopts::value<double>()->default_value("10"));
  add_engine_options(opts);
  add_prefix_caching_options(opts);
  add_deterministic_option(opts);
  add_replica_options(opts);
  add_sampling_options(opts);
  add_speculative_options(opts);
  add_generation_config_option(opts);
  return opts;
}

// The job's input as read on rank 0: every line still to answer (resumed lines skipped), each
// parsed into a request or an error, and the KV blocks the longest valid request needs.
struct BatchInput {
  std::vector<BatchLine> lines;
  DoneLines done;      // what --resume found already answered in --output
  int max_blocks = 1;  // of any one valid request
};

// Opens --input and checks --output (it must be empty unless --resume), then parses every line.
// Resume keys (DoneLines): the first line with a custom_id by that id, every other line by its
// number.
BatchInput read_batch_input(const cxxopts::ParseResult& args, const SamplingParams& defaults,
                            uint64_t job_seed, const ModelConfig& config, const Tokenizer& tok,
                            int block_size) {
  const std::string in_path = args["input"].as<std::string>();
  const std::string out_path = args["output"].as<std::string>();
  std::ifstream in(in_path, std::ios::binary);
  if (!in) throw Error("--input " + in_path + ": cannot open");
  BatchInput input;
  if (args.count("resume")) {
    input.done = load_done(out_path);
  } else if (std::ifstream probe(out_path, std::ios::binary | std::ios::ate);
             probe && probe.tellg() > 0) {
    throw Error("--output " + out_path +
                " already has results; pass --resume to continue that job "
                "or choose another file");
  }
  std::set<std::string> seen;
  // Lines' constraints compile here, before the engine opens, once per distinct text: a bad
  // schema is that line's error line.
  ConstraintCompiler constraints(tok);
  std::string text;
  for (size_t line_no = 1; std::getline(in, text); ++line_no) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    BatchLine b;
    b.line_no = line_no;
    const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
    const bool has_id = j.is_object() && j.contains("custom_id") && j["custom_id"].is_string();
    const std::string id = has_id ? j["custom_id"].get<std::string>() : std::string();
    const bool first_with_id = has_id && seen.insert(id).second;
    if (first_with_id ? input.done.ids.count(id) > 0 : input.done.lines.count(line_no) > 0) {
      continue;  // resumed: already in the output
    }
    if (j.is_discarded()) {
      b.req.error_code = ErrorCode::kInvalidJson;
      b.req.error_message = "line " + std::to_string(line_no) + " is not valid JSON";
    } else if (!has_id) {
      b.req.error_code = ErrorCode::kInvalidRequest;
      b.req.error_message = "\"custom_id\" (a string) is required";
    } else if (!first_with_id) {
      b.custom_id = id;
      b.req.error_code = ErrorCode::kDuplicateCustomId;
      b.req.error_message = "custom_id \"" + id + "\" appears more than once in the input";
    } else {
      b.custom_id = id;
      b.req = parse_request(j, defaults, tok, config, {"custom_id"});
      compile_request_constraint(b.req, constraints);
      if (b.req.ok()) {
        if (!b.req.params.seed) b.req.params.seed = mix_seed(job_seed, id);
        input.max_blocks = std::max(
            input.max_blocks,
            BlockAllocator::blocks_for(
                static_cast<int>(b.req.prompt.size()) + b.req.params.max_new_tokens, block_size));
      }
    }
    input.lines.push_back(std::move(b));
  }
  return input;
}

// Lines go through the request owner, which spreads them over the replicas; each finished one
// is written at once, in completion order.
class ResultLines final : public RequestEvents {
 public:
  ResultLines(ResultWriter& out, const std::vector<BatchLine>& lines) : out_(out), lines_(lines) {}
  void on_finished(const Finished& r, const Timings&) override {
    const BatchLine& b = lines_.at(static_cast<size_t>(r.id));
    json line{
        {"custom_id", b.custom_id},
        {"text", r.text},
        {"token_ids", r.tokens},
        {"finish_reason", to_string(r.finish_reason)},
        {"seed", *b.req.params.seed},
        {"usage", {{"prompt_tokens", r.prompt_tokens}, {"completion_tokens", r.tokens.size()}}}};
    if (b.req.params.logprobs) add_logprobs_json(r, &line);
    if (b.req.tools != nullptr) add_tool_calls_json(r.text, &line);
    if (b.req.params.prompt_logprobs) line["prompt_logprobs"] = prompt_logprobs_json(r);
    if (json spec = speculative_json(r); !spec.is_null()) line["speculative"] = std::move(spec);
    out_.write(line);
    ++finished;
  }
  size_t finished = 0;

 private:
  ResultWriter& out_;
  const std::vector<BatchLine>& lines_;
};

// Submits every valid line; writes the error line of every other one (and of a line the
// prompt-length check refuses). Returns how many lines failed.
size_t submit_lines(const std::vector<BatchLine>& lines, LocalServing& serving, ResultWriter& out) {
  size_t failed = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const BatchLine& b = lines[i];
    if (b.req.ok()) {
      const std::optional<Refusal> refusal =
          serving.submit(SubmitRequest{static_cast<int64_t>(i), b.req.prompt, b.req.params,
                                       *b.req.params.seed, b.req.constraint});
      if (!refusal) continue;
      out.write(error_line(b, refusal->code, refusal->message));
    } else {
      out.write(error_line(b, *b.req.error_code, b.req.error_message));
    }
    ++failed;
  }
  return failed;
}

// The job's closing lines on stderr: the prefix cache's reuse and the lines per replica.
void report_job(const Session& session, const LocalServing& serving) {
  if (session.settings.prefix_caching) {
    // Replica 0's cache (remote replicas' counters are not summed yet).
    const PrefixCacheCounters& pc = serving.blocks.counters();
    std::cerr << "llama2 batch: prefix cache: " << pc.hit_tokens << " of " << pc.queried_tokens
              << " prompt tokens reused (" << std::fixed << std::setprecision(1)
              << (pc.queried_tokens > 0 ? 100.0 * pc.hit_tokens / pc.queried_tokens : 0.0) << "%), "
              << pc.evicted_blocks << " cached blocks evicted" << std::endl;
  }
  if (session.settings.speculative.enabled()) {
    const SpecCounters c = serving.replicas.spec_counters();
    std::cerr << "llama2 batch: speculative: " << c.accepted << " of " << c.proposed
              << " proposed tokens accepted, " << c.emitted << " tokens in " << c.verify_steps
              << " verify steps" << std::endl;
  }
  if (serving.replicas.size() > 1) {
    std::string per;
    for (size_t r = 0; r < serving.replicas.stats().size(); ++r)
      per += (r ? ", " : "") + std::to_string(r) + ": " +
             std::to_string(serving.replicas.stats()[r].admitted);
    std::cerr << "llama2 batch: lines per replica: " << per << std::endl;
  }
}

// Rank 0: every line through the engine, results and error lines appended to --output as they
// complete. Returns the job's exit code.
int run_job(Session& session, const BatchInput& input, const std::string& out_path, bool resume,
            double interval, ReplicaLink* link) {
  ResultWriter out(out_path, resume);
  ResultLines results(out, input.lines);
  const std::unique_ptr<StepLog> step_log = StepLog::open(session.settings.knobs.step_log);
  LocalServing serving(*session.engine, *session.tokenizer, session.config, session.num_blocks,
                       session.block_size, scheduler_options(session.settings), results, link,
                       remote_replicas(session), step_log.get());
  const size_t failed = submit_lines(input.lines, serving, out);
  Progress progress(input.lines.size(), interval);
  uint64_t tokens = 0;
  while (!serving.owner.idle()) {
    tokens += static_cast<uint64_t>(serving.owner.step());
    progress.update(results.finished + failed, failed, tokens);
  }
  progress.update(results.finished + failed, failed, tokens, /*final=*/true);
  report_job(session, serving);
  // Error lines of earlier runs of a resumed job count: the job as a whole had invalid lines.
  return failed + input.done.errors > 0 ? kExitSomeLinesFailed : 0;
}

}  // namespace

int run_batch(int argc, char** argv, int rank) {
  cxxopts::Options opts = batch_options();
  const CommandLine cl =
      parse_command(opts, argc, argv, {"model", "input", "output"}, "", rank == 0);
  if (cl.help_requested) return 0;
  const double interval = cl.args["progress-interval"].as<double>();
  SamplingParams defaults = sampling_from_options(cl.args);
  const uint64_t job_seed = defaults.seed.value_or(random_seed());
  defaults.seed.reset();  // per line: the line's own seed, else one derived from the job seed

  SessionStart start = start_session(cl, kBatchSteps, rank);
  BatchInput input;   // rank 0
  int kv_blocks = 0;  // rank 0: max-batch-size of the longest request
  start.on_rank0([&] {
    if (!(interval > 0)) throw Error("--progress-interval must be > 0 seconds");
    apply_generation_config(cl.args, &start, &defaults);
    check_sampling_defaults(defaults, start.model);
    input = read_batch_input(cl.args, defaults, job_seed, start.model, *start.tokenizer,
                             start.cfg.block_size);
    kv_blocks = start.cfg.max_batch * input.max_blocks;
  });
  Session session = open_engine(std::move(start), kv_blocks);
  RankEngine& engine = *session.engine;
  if (!session.layout.leader()) return engine.worker_loop();
  if (rank != 0) return run_as_replica_leader(session);
  if (!cl.args.count("quiet")) std::cerr << engine.startup_report() << session.notes << std::flush;

  const std::unique_ptr<ReplicaLink> link = open_front_link(session);
  int code = 0;
  try {
    code = run_job(session, input, cl.args["output"].as<std::string>(), cl.args.count("resume") > 0,
                   interval, link.get());
  } catch (const std::exception& e) {
    // The workers and the other replicas' leaders are waiting: release them before reporting.
    if (link) send_shutdown(*link, remote_replicas(session), 1);
    engine.shutdown(1);
    throw ReportedError(e.what());
  }
  // The leaders end with the job's code, so every rank exits alike.
  if (link) send_shutdown(*link, remote_replicas(session), code);
  engine.shutdown(code);
  return code;
}

}  // namespace llama2
