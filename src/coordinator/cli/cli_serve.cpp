// `llama2 serve`: rank 0 serves the socket protocol (docs/PROTOCOL.md) with continuous batching;
// the other ranks run the worker loop. SIGTERM/SIGINT drain gracefully and exit 0; a step that
// stalls past --step-timeout-ms ends the job with exit code 3 (coordinator/serving/watchdog.h).
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iostream>

#include "common/check.h"
#include "coordinator/cli/cli_common.h"
#include "coordinator/cli/commands.h"
#include "coordinator/cli/replica_roles.h"
#include "coordinator/cli/serve_config.h"
#include "coordinator/cli/serve_http.h"
#include "coordinator/cli/session.h"
#include "coordinator/http/server_api.h"
#include "coordinator/replicas/replica_board.h"
#include "coordinator/replicas/replica_set.h"
#include "coordinator/requests/admission.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/requests/request_owner.h"
#include "coordinator/scheduler/batch_scheduler.h"
#include "coordinator/scheduler/block_allocator.h"
#include "coordinator/scheduler/step_log.h"
#include "coordinator/scheduler/step_runner.h"
#include "coordinator/serving/engine_inbox.h"
#include "coordinator/serving/metrics.h"
#include "coordinator/serving/serve_loop.h"
#include "coordinator/serving/socket_server.h"
#include "coordinator/serving/watchdog.h"

namespace llama2 {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_wake_fd{-1};
std::atomic<int> g_reload_fd{-1};  // the HTTP front's key reload (http_ops.h); -1: none

// Async-signal-safe: an atomic store and a write(2) to the server's eventfd.
void on_signal(int) {
  g_stop = true;
  const int fd = g_wake_fd;
  if (fd >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(fd, &one, sizeof(one));
  }
}

// SIGUSR2: re-read the API keys. Async-signal-safe: one byte to the reload thread's pipe
// (non-blocking: a full pipe already holds a reload request).
void on_reload_signal(int) {
  const int fd = g_reload_fd;
  if (fd >= 0) {
    const char r = 'r';
    [[maybe_unused]] ssize_t n = ::write(fd, &r, 1);
  }
}

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // Every rank: Open MPI's mpirun forwards SIGUSR2 to all of them, and its default action would
  // end a worker; only rank 0's front has keys to reload.
  sa.sa_handler = on_reload_signal;
  sigaction(SIGUSR2, &sa, nullptr);
}

// What the step watchdog reads: rank 0's own engine step (none on a dedicated front), or the
// longest silence of a remote replica's leader when that is longer (a leader reports after every
// step and every 100 ms when idle, replica_set.h): the same timeout rule for both.
StepClock job_step_clock(const RankEngine* engine, const ReplicaSet& replicas) {
  StepClock clock = engine != nullptr ? engine_step_clock(*engine) : StepClock{};
  int quiet_replica = -1;
  const std::chrono::milliseconds quiet = replicas.longest_silence(&quiet_replica);
  if (quiet_replica >= 0 && quiet > clock.running_for) {
    clock.running = true;
    clock.running_for = quiet;
  }
  return clock;
}

// The watchdog's one line for `clock`, naming the silent replica when that is what it saw.
std::string job_stall_message(const StepClock& clock, std::chrono::milliseconds timeout,
                              const RankEngine* engine, const ReplicaSet& replicas,
                              const ReplicaLayout& layout) {
  if (!clock.exited.empty()) {
    return clock.exited + " exited while the job ran (step " + std::to_string(clock.step) +
           (clock.running ? " running" : " done") +
           "): its tensor-parallel peers wait for it in every collective";
  }
  int quiet_replica = -1;
  const std::chrono::milliseconds quiet = replicas.longest_silence(&quiet_replica);
  if (quiet_replica >= 0 && quiet >= clock.running_for) {
    return "replica " + std::to_string(quiet_replica) + "'s leader (rank " +
           std::to_string(layout.leader_of(quiet_replica)) + ") has not reported for " +
           std::to_string(quiet.count()) + " ms (--step-timeout-ms " +
           std::to_string(timeout.count()) + "): its ranks have stopped, died or hung";
  }
  return stall_message(clock, timeout, engine != nullptr ? engine->describe_stall() : "");
}

// The engines may have sized their caches from GPU memory: admission checks use what the
// smallest replica allocated.
AdmissionOptions admission_options(const Session& session, const ServeConfig& s) {
  AdmissionOptions a;
  a.max_queue = s.max_queue;
  a.max_inflight_per_client = s.max_inflight;
  a.limits.max_position_embeddings = session.config.max_position_embeddings;
  a.limits.max_seq_len = s.max_seq_len;
  const int min_blocks =
      *std::min_element(session.replica_blocks.begin(), session.replica_blocks.end());
  a.limits.kv_capacity_tokens = int64_t{min_blocks} * session.block_size;
  return a;
}

// Rank 0 once the engine is open: the parts, in the order a request meets them
// (docs/ARCHITECTURE.md), built by the constructor; run() serves until a drain ends.
class Rank0Serve {
 public:
  // `http`: the HTTP front run_serve bound before the engine opened (null without --http).
  Rank0Serve(Session& session, const ServeConfig& s, HttpFront* http);
  int run();

 private:
  nlohmann::json health() const;
  std::string stats() const;
  void attach_http();
  void build_replicas();
  void start_endpoints();

  Session& session_;
  const ServeConfig& s_;
  HttpFront* http_;
  RankEngine* engine_;  // null on a dedicated front (--dedicated-front): every replica is remote
  ServeMetrics metrics_;
  Admission admission_;
  // The one inbox every endpoint posts to (after admission_: its commands hold places in it).
  EngineInbox inbox_;
  EngineDispatch dispatch_;
  HealthInfo info_;
  ReplicaBoard board_;  // per replica in health and stats (one entry with one replica)
  // Output constraints, compiled once per distinct text by both endpoints' threads at admission.
  ConstraintCompiler constraints_;
  std::unique_ptr<SocketServer> server_;
  std::unique_ptr<StepLog> step_log_;
  // Replica 0 in process, unless rank 0 is a dedicated front.
  std::unique_ptr<BlockAllocator> blocks_;
  std::unique_ptr<BatchScheduler> scheduler_;
  std::unique_ptr<StepRunner> runner_;
  std::unique_ptr<ReplicaLink> link_;
  std::unique_ptr<ReplicaSet> replicas_;
  std::unique_ptr<RequestOwner> owner_;
};

Rank0Serve::Rank0Serve(Session& session, const ServeConfig& s, HttpFront* http)
    : session_(session),
      s_(s),
      http_(http),
      engine_(session.engine.get()),
      admission_(admission_options(session, s), &metrics_),
      dispatch_(random_seed()),
      info_{session.layout.world,
            session.backend,
            session.dtype,
            session.kv_cache_dtype,
            session.settings.synthetic.empty() ? session.settings.model_dir
                                               : "synthetic-" + session.settings.synthetic,
            session.settings.max_batch,
            s.max_queue,
            s.max_seq_len},
      board_(session.layout.replicas),
      constraints_(*session.tokenizer) {
  if (!s_.quiet && engine_ != nullptr) {
    std::cerr << engine_->startup_report() << session_.notes << std::flush;
  }
  server_ = std::make_unique<SocketServer>(
      s_.server, inbox_, admission_, *session.tokenizer, constraints_, session.config, s_.defaults,
      [this] { return health(); }, [this] { return stats(); });
  if (http_ != nullptr) attach_http();
  build_replicas();
  owner_ = std::make_unique<RequestOwner>(admission_, *replicas_, dispatch_, &metrics_);
}

// One health answer for the socket and the HTTP front: the job's totals and each replica's.
nlohmann::json Rank0Serve::health() const {
  nlohmann::json h = health_event(inbox_, admission_, info_);
  h["tp"] = session_.layout.tp;
  h["replicas"] = replicas_json(board_.snapshot());
  return h;
}

std::string Rank0Serve::stats() const {
  return metrics_.render(admission_.gauges()) + replicas_prometheus(board_.snapshot());
}

void Rank0Serve::attach_http() {
  const HttpLimits limits{admission_.options().limits, s_.server.request_timeout_ms};
  const EngineConfig& settings = session_.settings;
  ApiContext api;
  api.served_models = s_.http.served_models;
  if (api.served_models.empty())
    api.served_models = {default_served_model(settings.model_dir, settings.synthetic)};
  api.defaults = s_.defaults;
  api.config = session_.config;
  api.strict = s_.http.strict_api;
  api.max_tokens_cap = s_.http.max_tokens_cap;
  // What fixes the output for given parameters: the build, the model, the dtypes, the sharding.
  api.system_fingerprint = api_system_fingerprint(
      llama2_version(), {{"model", model_config_to_json(session_.config)},
                         {"dtype", to_string(session_.dtype)},
                         {"kv_cache_dtype", kv_dtype_name(session_.kv_cache_dtype, session_.dtype)},
                         {"tp", session_.layout.tp}});
  const std::string name = api.served_models.front();  // /metrics' model_name label
  http_->attach(
      HttpDeps{inbox_, admission_, *session_.tokenizer, std::move(api), limits,
               [this, name] { return stats() + metrics_.render_vllm(admission_.gauges(), name); },
               [this] { return health(); }, constraints_});
}

void Rank0Serve::build_replicas() {
  const EngineConfig& settings = session_.settings;
  step_log_ = StepLog::open(settings.knobs.step_log);
  if (engine_ != nullptr) {
    blocks_ = std::make_unique<BlockAllocator>(session_.num_blocks, session_.block_size);
    scheduler_ = std::make_unique<BatchScheduler>(*session_.tokenizer, session_.config, *blocks_,
                                                  scheduler_options(settings));
    runner_ = std::make_unique<StepRunner>(*scheduler_, *engine_, step_log_.get());
  }
  link_ = open_front_link(session_);
  replicas_ = std::make_unique<ReplicaSet>(runner_.get(), link_.get(), remote_replicas(session_),
                                           settings.max_batch, session_.block_size);
  replicas_->set_board(&board_);
}

void Rank0Serve::start_endpoints() {
  try {
    server_->start();
  } catch (const std::exception& e) {
    replicas_->shutdown(1);
    if (engine_ != nullptr) engine_->shutdown(1);
    throw ReportedError(e.what());
  }
  g_wake_fd = server_->wake_fd();
  const ReplicaLayout& l = session_.layout;
  std::cerr << "llama2 serve: listening on " << s_.server.socket_path << " (max batch "
            << session_.settings.max_batch << ", max queue " << s_.max_queue << ", max seq len "
            << s_.max_seq_len << ", KV "
            << admission_.options().limits.kv_capacity_tokens / session_.block_size << " blocks x "
            << session_.block_size << ", " << l.replicas << " replica(s) of tp " << l.tp
            << (l.front_only() ? ", dedicated front" : "") << ")" << std::endl;
  if (http_ != nullptr) {
    std::cerr << "llama2 serve: HTTP on " << s_.http.front.host << ":" << http_->port()
              << (s_.http.front.api_key.empty() && s_.http.front.api_key_file.empty()
                      ? ""
                      : " (API key required)")
              << std::endl;
  }
}

int Rank0Serve::run() {
  start_endpoints();
  // Started once the socket exists: from here on a stalled step ends the job (watchdog.h). A
  // replica leader that stops reporting for longer than the step timeout counts as a stalled step
  // too (job_step_clock); so does a rank of rank 0's group whose process exited, at once.
  const std::chrono::milliseconds step_timeout = s_.step_timeout;
  auto watchdog = std::make_unique<StepWatchdog>(
      step_timeout, [this] { return job_step_clock(engine_, *replicas_); },
      [this, step_timeout](const StepClock& clock) {
        end_job_after_stall(
            job_stall_message(clock, step_timeout, engine_, *replicas_, session_.layout), *server_,
            engine_, clock.exited.empty() ? kStallLinger : kExitedLinger);
      });
  serve_loop(inbox_, dispatch_, *owner_, g_stop, std::chrono::milliseconds(s_.shutdown_timeout_ms));
  // From here the ranks leave on purpose: an exited one is no longer a failure.
  watchdog.reset();
  replicas_->shutdown(0);
  if (engine_ != nullptr) engine_->shutdown(0);
  g_wake_fd = -1;
  g_reload_fd = -1;
  if (http_ != nullptr) http_->stop(/*flush_ms=*/2000);  // streams write the drain's last events
  server_->stop(/*flush_ms=*/2000);
  std::cerr << "llama2 serve: stopped" << std::endl;
  return 0;
}

int serve_on_rank0(Session& session, const ServeConfig& s, std::unique_ptr<HttpFront> http) {
  return Rank0Serve(session, s, http.get()).run();
}

}  // namespace

int run_serve(int argc, char** argv, int rank) {
  cxxopts::Options opts = serve_options();
  const CommandLine cl = parse_command(opts, argc, argv, {"model", "socket"}, "", rank == 0);
  if (cl.help_requested) return 0;
  // mpirun forwards SIGTERM/SIGINT to every rank: workers must survive it and leave only when
  // rank 0 broadcasts the shutdown plan.
  install_signal_handlers();

  SessionStart start = start_session(cl, kServeSteps, rank);
  ServeConfig serve;                // rank 0: built once, before the engine opens
  int kv_blocks = 0;                // rank 0: max-batch-size sequences of max_seq_len tokens
  std::unique_ptr<HttpFront> http;  // rank 0 with --http: listening ("starting") during the load
  start.on_rank0([&] {
    serve = serve_config(cl.args, start);
    kv_blocks =
        start.cfg.max_batch * BlockAllocator::blocks_for(serve.max_seq_len, start.cfg.block_size);
    if (serve.http.enabled) {
      http = start_http_front(serve.http, start.cfg.knobs);
      g_reload_fd = http->reload_fd();
    }
  });
  Session session = open_engine(std::move(start), kv_blocks);
  if (session.layout.front_only()) return serve_on_rank0(session, serve, std::move(http));
  if (!session.layout.leader()) return session.engine->worker_loop();
  if (rank != 0) return run_as_replica_leader(session);
  return serve_on_rank0(session, serve, std::move(http));
}

}  // namespace llama2
