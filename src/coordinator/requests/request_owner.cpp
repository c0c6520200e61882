#include "coordinator/requests/request_owner.h"

#include <algorithm>
#include <cstdint>

#include "common/check.h"

namespace llama2 {

namespace {
double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
}  // namespace

RequestOwner::RequestOwner(Admission& admission, StepRunner& local, RequestEvents& events,
                           ServeMetrics* metrics)
    : admission_(admission),
      own_replicas_(std::make_unique<ReplicaSet>(local)),
      replicas_(*own_replicas_),
      events_(events),
      metrics_(metrics) {
  refresh_gauges();
}

RequestOwner::RequestOwner(Admission& admission, ReplicaSet& replicas, RequestEvents& events,
                           ServeMetrics* metrics)
    : admission_(admission), replicas_(replicas), events_(events), metrics_(metrics) {
  refresh_gauges();
}

std::optional<Refusal> RequestOwner::submit(SubmitRequest req, Reservation place,
                                            Clock::time_point deadline, uint64_t client) {
  std::optional<Refusal> refusal =
      admission_.check_prompt(static_cast<int64_t>(req.prompt.size()), req.params.max_new_tokens);
  if (refusal) {
    admission_.count_refusal(refusal->code);
    return refusal;  // `place` goes back as it is dropped
  }
  admission_.consume(std::move(place));
  LLAMA2_CHECK(records_.count(req.id) == 0);
  Record& r = records_[req.id];
  r.client = client;
  r.deadline = deadline;
  r.added = r.last_token = Clock::now();
  earliest_deadline_ = std::min(earliest_deadline_, deadline);
  queue_.push_back(std::move(req));
  return std::nullopt;
}

void RequestOwner::dispatch() {
  while (!queue_.empty()) {
    const int64_t id = queue_.front().id;
    if (replicas_.try_admit(queue_.front()) < 0) break;  // FIFO: no overtaking
    queue_.pop_front();
    Record& r = records_.at(id);
    r.admitted = true;
    r.queue_s = seconds_between(r.added, Clock::now());
    running_order_.push_back(id);
    admission_.left_queue();
    // Before any event of it: `health` never shows fewer blocks or running requests than the
    // events a client has already received.
    refresh_gauges();
    events_.on_admitted(id);
  }
}

void RequestOwner::refresh_gauges() {
  admission_.set_engine_gauges(replicas_.running(), replicas_.kv_used(), replicas_.kv_total());
  admission_.set_preemptions(replicas_.preemptions());
  admission_.set_spec_counters(replicas_.spec_counters());
  // The prefix cache's numbers are those of the in-process replica (remote replicas' caches are
  // not summed yet); none on a dedicated front.
  if (const BlockAllocator* blocks = replicas_.local_blocks()) {
    const PrefixCacheCounters& pc = blocks->counters();
    admission_.set_prefix_cache_gauges(blocks->cached_blocks(), pc.queried_tokens, pc.hit_tokens,
                                       pc.evicted_blocks);
  }
}

void RequestOwner::finish_queued(SubmitRequest&& req, FinishReason reason) {
  Finished done;
  done.id = req.id;
  done.finish_reason = reason;
  done.seed = req.params.seed.value_or(req.seed);
  done.prompt_tokens = static_cast<int>(req.prompt.size());
  on_finished(std::move(done));
}

bool RequestOwner::cancel(int64_t id, FinishReason reason) {
  const auto rec = records_.find(id);
  if (rec == records_.end()) return false;
  if (rec->second.admitted) return replicas_.cancel(CancelRequest{id, reason}, *this);
  const auto it = std::find_if(queue_.begin(), queue_.end(),
                               [id](const SubmitRequest& q) { return q.id == id; });
  LLAMA2_CHECK(it != queue_.end());
  SubmitRequest req = std::move(*it);
  queue_.erase(it);
  finish_queued(std::move(req), reason);
  return true;
}

int RequestOwner::disconnect(uint64_t client) {
  std::vector<int64_t> ids;
  for (const auto& [id, r] : records_)
    if (r.client == client) ids.push_back(id);
  std::sort(ids.begin(), ids.end());  // a stable order of done events (the client is gone)
  for (int64_t id : ids) cancel(id, FinishReason::kCancelled);
  return static_cast<int>(ids.size());
}

void RequestOwner::cancel_all(FinishReason reason) {
  std::vector<int64_t> ids;
  for (const auto& q : queue_) ids.push_back(q.id);
  ids.insert(ids.end(), running_order_.begin(), running_order_.end());
  for (int64_t id : ids) cancel(id, reason);
}

int RequestOwner::expire(Clock::time_point now) {
  if (now < earliest_deadline_) return 0;
  std::vector<int64_t> ids;
  for (const auto& q : queue_)
    if (records_.at(q.id).deadline <= now) ids.push_back(q.id);
  for (int64_t id : running_order_)
    if (records_.at(id).deadline <= now) ids.push_back(id);
  for (int64_t id : ids) cancel(id, FinishReason::kTimeout);
  earliest_deadline_ = Clock::time_point::max();
  for (const auto& [id, r] : records_)
    earliest_deadline_ = std::min(earliest_deadline_, r.deadline);
  return static_cast<int>(ids.size());
}

int RequestOwner::step() {
  expire(Clock::now());
  dispatch();
  // Idle with remote replicas, the step still reads their heartbeats (replica_set.h).
  if (replicas_.idle() && !replicas_.has_remotes()) return 0;
  const int generated = replicas_.step(*this);
  refresh_gauges();
  return generated;
}

void RequestOwner::on_token(const TokenEvent& ev) {
  Record& r = records_.at(ev.id);
  if (ev.index == 0 || metrics_ != nullptr) {
    const Clock::time_point now = Clock::now();
    if (ev.index == 0) r.ttft_s = seconds_between(r.added, now);
    if (ev.index > 0 && metrics_ != nullptr)
      metrics_->inter_token(seconds_between(r.last_token, now));
    r.last_token = now;
  }
  events_.on_token(ev);
}

void RequestOwner::on_finished(Finished&& done) {
  const auto rec = records_.find(done.id);
  LLAMA2_CHECK(rec != records_.end());
  const Record r = rec->second;
  records_.erase(rec);
  Timings t;
  t.total_s = seconds_between(r.added, Clock::now());
  t.queue_s = r.admitted ? r.queue_s : t.total_s;
  t.ttft_s = done.tokens.empty() ? 0.0 : r.ttft_s;
  if (r.admitted) {
    running_order_.erase(std::find(running_order_.begin(), running_order_.end(), done.id));
  } else {
    admission_.left_queue();
  }
  if (metrics_ != nullptr) {
    metrics_->request_finished(done.finish_reason, t.queue_s, t.ttft_s, t.total_s,
                               done.prompt_tokens, static_cast<int>(done.tokens.size()));
  }
  refresh_gauges();
  events_.on_finished(done, t);
}

namespace {
AdmissionOptions local_admission(const ModelConfig& config, int num_blocks, int block_size) {
  AdmissionOptions o;
  o.limits.max_position_embeddings = config.max_position_embeddings;
  o.limits.kv_capacity_tokens = int64_t{num_blocks} * block_size;
  return o;
}
int min_blocks(const std::vector<RemoteReplica>& remotes) {
  int n = INT32_MAX;
  for (const RemoteReplica& r : remotes) n = std::min(n, r.kv_blocks);
  return n;
}
}  // namespace

LocalServing::LocalServing(StepExecutor& exec, const Tokenizer& tok, const ModelConfig& config,
                           int num_blocks, int block_size, SchedulerOptions opts,
                           RequestEvents& events, ReplicaLink* link,
                           std::vector<RemoteReplica> remotes, StepObserver* observer)
    : blocks(num_blocks, block_size),
      admission(local_admission(config, std::min(num_blocks, min_blocks(remotes)), block_size)),
      scheduler(tok, config, blocks, opts),
      runner(scheduler, exec, observer),
      replicas(&runner, link, std::move(remotes), opts.max_batch_size, block_size),
      owner(admission, replicas, events) {}

std::optional<Refusal> LocalServing::submit(SubmitRequest req) {
  Reservation place = admission.reserve(0);
  if (!place) return place.refusal();
  return owner.submit(std::move(req), std::move(place));
}

}  // namespace llama2
