#include "coordinator/replicas/replica_leader.h"

#include <algorithm>
#include <chrono>
#include <deque>

#include "coordinator/replicas/nap.h"
#include "coordinator/replicas/replica_set.h"
#include "coordinator/replicas/replica_wire.h"
#include "coordinator/requests/request_constraint.h"
#include "coordinator/scheduler/step_runner.h"

namespace llama2 {
namespace {

using Clock = std::chrono::steady_clock;

class Leader final : public WireVisitor {
 public:
  Leader(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
         BlockAllocator& blocks, SchedulerOptions opts, ReplicaLink& link)
      : blocks_(blocks),
        scheduler_(tok, config, blocks, opts),
        constraints_(tok),
        runner_(scheduler_, exec),
        link_(link),
        out_(*this) {}

  int run() {
    Nap nap(std::chrono::microseconds(1000));
    Clock::time_point last_sent = Clock::now() - kReplicaHeartbeat;
    while (!stop_) {
      bool got = false;
      std::string bytes;
      int source = 0;
      while (!stop_ && link_.poll(&bytes, &source)) {
        read_wire(bytes.data(), bytes.size(), *this);
        got = true;
      }
      if (stop_) break;
      // The front sends only what fits (replica_set.h), so this admits at once.
      while (!pending_.empty() && scheduler_.try_admit(pending_.front())) pending_.pop_front();
      if (!scheduler_.idle()) {
        runner_.step(out_);
        ++steps_;
      }
      if (!out_.writer.empty() || Clock::now() - last_sent >= kReplicaHeartbeat) {
        send();
        last_sent = Clock::now();
      }
      if (scheduler_.idle() && !got) {
        nap.sleep();
      } else {
        nap.reset();
      }
    }
    // The front shuts down with nothing in flight, or on a failure path where it reads nothing
    // more: no reply. The sends already started complete (small, eager) before MPI_Finalize.
    link_.flush();
    return code_;
  }

  void on_submit(SubmitRequest&& req) override {
    if (req.constraint != nullptr && !compile(req)) return;
    pending_.push_back(std::move(req));
  }
  void on_cancel(const CancelRequest& c) override {
    const auto it = std::find_if(pending_.begin(), pending_.end(),
                                 [&](const SubmitRequest& r) { return r.id == c.id; });
    if (it != pending_.end()) {
      Finished done = ended(c.id, it->prompt.size(), c.reason);
      done.seed = it->params.seed.value_or(it->seed);
      pending_.erase(it);
      out_.on_finished(std::move(done));
      return;
    }
    // Not running: it finished before the cancel arrived, and its Finished is on its way.
    scheduler_.cancel(c, out_);
  }
  void on_shutdown(int exit_code) override {
    stop_ = true;
    code_ = exit_code;
  }

 private:
  // The step's events, in order, for the next message.
  struct Out final : SchedulerEvents {
    explicit Out(Leader&) {}
    void on_token(const TokenEvent& ev) override { writer.token(ev); }
    void on_finished(Finished&& done) override { writer.finished(done); }
    WireWriter writer;
  };
  // The wire carries a constraint's spec; its grammar is compiled here, once per distinct text
  // (the leader's own cache). The front compiled the same spec over the same vocabulary, so a
  // failure means the two disagree: the request ends as cancelled rather than run unconstrained.
  bool compile(SubmitRequest& req) {
    auto c = std::make_shared<RequestConstraint>(*req.constraint);
    if (constraints_.compile(*c)) {
      Finished done = ended(req.id, req.prompt.size(), FinishReason::kCancelled);
      done.seed = req.params.seed.value_or(req.seed);
      out_.on_finished(std::move(done));
      return false;
    }
    req.constraint = std::move(c);
    return true;
  }
  static Finished ended(int64_t id, size_t prompt, FinishReason reason) {
    Finished f;
    f.id = id;
    f.finish_reason = reason;
    f.prompt_tokens = static_cast<int>(prompt);
    return f;
  }
  // Gauges first: the front applies them before the events, so a client that got a `done` sees
  // its blocks freed in `health`.
  void send() {
    WireWriter msg;
    ReplicaGauges g;
    g.running = static_cast<int>(scheduler_.running());
    g.pending = static_cast<int>(pending_.size());
    g.kv_used = blocks_.used_blocks();
    g.kv_total = blocks_.num_blocks();
    g.steps = steps_;
    g.preemptions = scheduler_.preemptions();
    g.spec = scheduler_.spec_counters();
    msg.gauges(g);
    link_.send(0, msg.take() + out_.writer.take());
  }

  BlockAllocator& blocks_;
  BatchScheduler scheduler_;
  ConstraintCompiler constraints_;
  StepRunner runner_;
  ReplicaLink& link_;
  Out out_;
  std::deque<SubmitRequest> pending_;
  bool stop_ = false;
  int code_ = 0;
  int64_t steps_ = 0;
};

}  // namespace

int run_replica_leader(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                       BlockAllocator& blocks, SchedulerOptions opts, ReplicaLink& link) {
  Leader leader(exec, tok, config, blocks, opts, link);
  return leader.run();
}

}  // namespace llama2
