// `llama2 serve`: rank 0 serves the socket protocol (docs/PROTOCOL.md) with continuous batching;
// the other ranks run the worker loop. SIGTERM/SIGINT drain gracefully and exit 0; a step that
// stalls past --step-timeout-ms ends the job with exit code 3 (coordinator/watchdog.h).
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>
#include <map>
#include <random>

#include "common/check.h"
#include "coordinator/block_allocator.h"
#include "coordinator/cli_common.h"
#include "coordinator/commands.h"
#include "coordinator/generator.h"
#include "coordinator/metrics.h"
#include "coordinator/session.h"
#include "coordinator/socket_server.h"
#include "coordinator/token_bound.h"
#include "coordinator/watchdog.h"

namespace llama2 {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_stop{false};
std::atomic<int> g_wake_fd{-1};

// Async-signal-safe: an atomic store and a write(2) to the server's eventfd.
void on_signal(int) {
  g_stop = true;
  const int fd = g_wake_fd;
  if (fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

// Where each engine-side request id sends its events.
struct Route {
  uint64_t conn = 0;
  uint64_t serial = 0;  // the socket server's number for this generation
  std::string id;
  std::string id_json;  // id serialized once for the token events
  bool stream = true;
  bool admitted = false;
  Clock::time_point arrival, last_token;
  uint64_t seed = 0;
};

cxxopts::Options serve_options() {
  cxxopts::Options opts("llama2 serve",
                        "Serve generations on a Unix socket (protocol: docs/PROTOCOL.md) with "
                        "continuous batching. SIGTERM/SIGINT drain in-flight requests and exit 0.");
  opts.add_options()("socket", "Unix socket path (created 0600)", cxxopts::value<std::string>())(
      "max-batch-size", "Sequences decoded together per step",
      cxxopts::value<int>()->default_value(std::to_string(kServeSteps.max_batch)))(
      "max-queue", "Generations waiting for admission before queue_full",
      cxxopts::value<int>()->default_value("256"))(
      "max-inflight-per-connection",
      "Unfinished generations one connection may have before too_many_in_flight (default: half "
      "of --max-batch-size, at least 1)",
      cxxopts::value<int>())(
      "max-seq-len", "Prompt + max_new_tokens limit (default: the model's max_position_embeddings)",
      cxxopts::value<int>())("kv-cache-blocks",
                             "KV blocks (default: cuda, what --gpu-memory-fraction leaves; cpu, "
                             "max-batch-size full-length sequences)",
                             cxxopts::value<int>())(
      "prefill-chunk", "Prompt tokens per step across sequences",
      cxxopts::value<int>()->default_value(std::to_string(kServeSteps.prefill_chunk)))(
      "request-timeout-ms", "Default and maximum per-request timeout",
      cxxopts::value<int64_t>()->default_value("600000"))(
      "shutdown-timeout-ms", "How long in-flight requests may finish after SIGTERM",
      cxxopts::value<int64_t>()->default_value("30000"))(
      "step-timeout-ms",
      "A step running longer than this is stalled: every client gets an internal error and the "
      "job exits with code 3 (0: never)",
      cxxopts::value<int64_t>()->default_value("60000"));
  add_engine_options(opts);
  add_sampling_options(opts);
  return opts;
}

// The socket server's limits from the flags; max_seq_len and the KV capacity come from the
// model and the engine later.
ServerOptions server_options_from(const cxxopts::ParseResult& args, int max_batch) {
  ServerOptions o;
  o.socket_path = args["socket"].as<std::string>();
  o.max_queue = args["max-queue"].as<int>();
  // Half the batch slots: a connection that pipelines without reading leaves the rest to others.
  o.max_inflight_per_connection = args.count("max-inflight-per-connection")
                                      ? args["max-inflight-per-connection"].as<int>()
                                      : std::max(1, max_batch / 2);
  o.request_timeout_ms = args["request-timeout-ms"].as<int64_t>();
  return o;
}

// Rank 0: the serve flags' ranges (the engine flags were checked with the EngineConfig).
void validate_serve_flags(const cxxopts::ParseResult& args, const ServerOptions& o) {
  auto at_least = [](int64_t v, int64_t lo, const char* flag) {
    if (v < lo) {
      throw Error(std::string(flag) + " must be >= " + std::to_string(lo) + " (got " +
                  std::to_string(v) + ")");
    }
  };
  at_least(o.max_queue, 0, "--max-queue");
  at_least(o.max_inflight_per_connection, 1, "--max-inflight-per-connection");
  at_least(o.request_timeout_ms, 1, "--request-timeout-ms");
  at_least(args["shutdown-timeout-ms"].as<int64_t>(), 0, "--shutdown-timeout-ms");
  at_least(args["step-timeout-ms"].as<int64_t>(), 0, "--step-timeout-ms");
}

// --max-seq-len, or the model's max_position_embeddings; Error outside [2, that].
int serve_max_seq_len(const cxxopts::ParseResult& args, const ModelConfig& config) {
  const int n =
      args.count("max-seq-len") ? args["max-seq-len"].as<int>() : config.max_position_embeddings;
  if (n < 2 || n > config.max_position_embeddings) {
    throw Error("--max-seq-len must be in [2, " + std::to_string(config.max_position_embeddings) +
                "] (max_position_embeddings) (got " + std::to_string(n) + ")");
  }
  return n;
}

}  // namespace

int run_serve(int argc, char** argv, int rank) {
  cxxopts::Options opts = serve_options();
  const CommandLine cl = parse_command(opts, argc, argv, {"model", "socket"}, "", rank == 0);
  if (cl.help_requested) return 0;
  const cxxopts::ParseResult& args = cl.args;
  // mpirun forwards SIGTERM/SIGINT to every rank: workers must survive it and leave only when
  // rank 0 broadcasts the shutdown plan.
  install_signal_handlers();

  SamplingParams defaults = sampling_from_options(args);
  SessionStart start = start_session(cl, kServeSteps, rank);
  ServerOptions sopt = server_options_from(args, start.cfg.max_batch);
  int kv_blocks = 0;  // rank 0: max-batch-size sequences of max_seq_len tokens
  start.on_rank0([&] {
    validate_serve_flags(args, sopt);
    check_sampling_defaults(defaults, start.model);
    sopt.max_seq_len = serve_max_seq_len(args, start.model);
    kv_blocks =
        start.cfg.max_batch * BlockAllocator::blocks_for(sopt.max_seq_len, start.cfg.block_size);
  });
  Session session = open_engine(std::move(start), kv_blocks);
  const EngineConfig& settings = session.settings;
  const int max_batch = settings.max_batch, max_queue = sopt.max_queue;
  const int64_t shutdown_timeout = args["shutdown-timeout-ms"].as<int64_t>();
  const std::chrono::milliseconds step_timeout(args["step-timeout-ms"].as<int64_t>());
  RankEngine& engine = *session.engine;
  if (rank != 0) return engine.worker_loop();
  if (!args.count("quiet")) std::cerr << engine.startup_report() << std::flush;

  sopt.max_piece_bytes =
      max_piece_bytes_for_bound(settings.model_dir + "/tokenizer.model", *session.tokenizer);
  ServeMetrics metrics;
  // The engine may have sized the cache from GPU memory: admission checks use what it allocated.
  sopt.kv_capacity_tokens = static_cast<int>(
      std::min<int64_t>(int64_t{session.num_blocks} * session.block_size, INT32_MAX));
  BlockAllocator blocks(session.num_blocks, session.block_size);
  std::map<int64_t, Route> routes;
  std::unique_ptr<SocketServer> server;
  auto health = [&]() {
    const Gauges g = metrics.gauges();
    return json{{"event", "health"},
                {"status", !server              ? "ready"
                           : server->stalled()  ? "stalled"
                           : server->draining() ? "draining"
                                                : "ready"},
                {"ranks", engine.shard().tp},
                {"backend", engine.backend_name()},
                {"dtype", engine.dtype_name()},
                {"kv_cache_dtype", engine.kv_dtype_name()},
                {"model", settings.synthetic.empty() ? settings.model_dir
                                                     : "synthetic-" + settings.synthetic},
                {"kv_blocks_total", g.kv_blocks_total},
                {"kv_blocks_used", g.kv_blocks_used},
                {"running", g.running},
                {"queued", server ? server->waiting() : 0},
                {"max_batch_size", max_batch},
                {"max_queue", max_queue},
                {"max_seq_len", sopt.max_seq_len}};
  };
  server = std::make_unique<SocketServer>(sopt, *session.tokenizer, session.config, defaults,
                                          health, [&] { return metrics.render(); });

  // Gauges change at admission and completion; refreshing them there (not only after a step) means
  // `health` never shows fewer blocks or requests than the events a client has already received.
  const Generator* gen_ptr = nullptr;
  auto refresh_gauges = [&] {
    if (gen_ptr == nullptr) return;
    metrics.set_gauges(Gauges{static_cast<int>(gen_ptr->running()),
                              static_cast<int>(gen_ptr->queued()), blocks.used_blocks(),
                              blocks.num_blocks()});
  };
  GeneratorCallbacks cb;
  cb.on_admit = [&](int64_t id) {
    Route& r = routes.at(id);
    r.admitted = true;
    server->left_queue();
    refresh_gauges();
  };
  cb.on_token = [&](int64_t id, int index, int token, const std::string& piece) {
    Route& r = routes.at(id);
    const auto now = Clock::now();
    if (index > 0) metrics.inter_token(std::chrono::duration<double>(now - r.last_token).count());
    r.last_token = now;
    if (r.stream)
      server->send_quiet(r.conn, SocketServer::token_event(r.id_json, index, token, piece), r.id,
                         r.serial, false);
  };
  cb.on_done = [&](const GenResult& res) {
    auto it = routes.find(res.id);
    Route& r = it->second;
    if (!r.admitted) server->left_queue();
    metrics.request_finished(res.finish_reason, res.queue_s, res.ttft_s, res.total_s,
                             static_cast<int>(res.prompt.size()),
                             static_cast<int>(res.tokens.size()));
    json ev;
    if (res.finish_reason == "shutting_down") {
      ev = json{{"event", "error"},
                {"id", r.id},
                {"code", "shutting_down"},
                {"message", "the server shut down before this generation finished"}};
    } else {
      ev = json{{"event", "done"},
                {"id", r.id},
                {"finish_reason", res.finish_reason},
                {"seed", r.seed},
                {"usage",
                 {{"prompt_tokens", res.prompt.size()}, {"completion_tokens", res.tokens.size()}}},
                {"timings",
                 {{"queue_s", res.queue_s},
                  {"time_to_first_token_s", res.ttft_s},
                  {"total_s", res.total_s}}}};
      if (!r.stream) {
        ev["text"] = res.text;
        ev["token_ids"] = res.tokens;
      }
    }
    server->send(r.conn, ev, r.id, r.serial, true);
    routes.erase(it);
    refresh_gauges();
  };
  const StepLog step_log = open_step_log(settings.knobs.step_log);
  Generator gen(engine, *session.tokenizer, session.config, blocks,
                generator_options(settings, step_log.get()), cb);
  gen_ptr = &gen;

  try {
    server->start();
  } catch (const std::exception& e) {
    engine.shutdown(1);
    throw ReportedError(e.what());
  }
  g_wake_fd = server->wake_fd();
  std::cerr << "llama2 serve: listening on " << sopt.socket_path << " (max batch " << max_batch
            << ", max queue " << max_queue << ", max seq len " << sopt.max_seq_len << ", KV "
            << session.num_blocks << " blocks x " << session.block_size << ")" << std::endl;
  // Started once the socket exists: from here on a stalled step ends the job (watchdog.h).
  StepWatchdog watchdog(
      step_timeout, [&] { return engine_step_clock(engine); },
      [&](const StepClock& clock) {
        end_job_after_stall(stall_message(clock, step_timeout, engine.describe_stall()), *server,
                            engine);
      });

  std::mt19937_64 seeder(random_seed());
  int64_t next_id = 0;
  Clock::time_point drain_deadline = Clock::time_point::max();
  for (;;) {
    for (ServeCommand& cmd :
         server->take_commands(std::chrono::milliseconds(gen.idle() ? 50 : 0))) {
      if (cmd.kind == ServeCommand::Kind::kGenerate) {
        const int64_t id = next_id++;
        const uint64_t seed = cmd.request.params.seed.value_or(seeder());
        Route& r = routes[id];
        r.conn = cmd.conn;
        r.serial = cmd.serial;
        r.id = cmd.id;
        r.id_json = json(cmd.id).dump(-1, ' ', false, json::error_handler_t::replace);
        r.stream = cmd.stream;
        r.arrival = r.last_token = cmd.arrival;
        r.seed = seed;
        gen.add(GenRequest{id, cmd.request.prompt, cmd.request.params, seed, cmd.deadline});
      } else {
        // Cancel one id, or everything of a connection that went away, or free a generation the
        // socket thread already ended at its deadline (found by serial: the id may be reused).
        const bool expired = cmd.kind == ServeCommand::Kind::kExpired;
        std::vector<int64_t> hit;
        for (const auto& [id, r] : routes) {
          if (expired ? r.serial == cmd.serial
                      : r.conn == cmd.conn &&
                            (cmd.kind == ServeCommand::Kind::kDisconnect || r.id == cmd.id))
            hit.push_back(id);
        }
        for (int64_t id : hit) gen.cancel(id, expired ? "timeout" : "cancelled");
      }
    }
    if (g_stop && !server->draining()) {
      server->set_draining();
      drain_deadline = Clock::now() + std::chrono::milliseconds(shutdown_timeout);
      std::cerr << "llama2 serve: draining (" << routes.size() << " in flight, up to "
                << shutdown_timeout << " ms)" << std::endl;
    }
    if (server->draining() && Clock::now() >= drain_deadline) gen.cancel_all("shutting_down");
    if (!gen.idle()) {
      gen.step();
      server->wake();  // the step's token events went out quietly
    }
    refresh_gauges();
    if (server->draining() && gen.idle()) break;
  }
  engine.shutdown(0);
  g_wake_fd = -1;
  server->stop(/*flush_ms=*/2000);
  std::cerr << "llama2 serve: stopped" << std::endl;
  return 0;
}

}  // namespace llama2
