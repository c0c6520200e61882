#include "coordinator/replicas/replica_set.h"

#include <algorithm>
#include <cstdint>

#include "common/check.h"
#include "coordinator/replicas/replica_link.h"
#include "coordinator/scheduler/block_allocator.h"

namespace llama2 {
namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

// One remote leader's message, delivered to the owner's SchedulerEvents.
class ReplicaSet::Inbox final : public WireVisitor {
 public:
  Inbox(ReplicaSet& set, int remote, SchedulerEvents& events)
      : set_(set), remote_(remote), events_(events) {}
  void on_gauges(const ReplicaGauges& g) override {
    set_.stats_[static_cast<size_t>(set_.first_remote_ + remote_)].gauges = g;
  }
  void on_token(const TokenEvent& ev) override {
    ++tokens;
    events_.on_token(ev);
  }
  void on_finished(Finished&& done) override {
    const auto it = set_.held_.find(done.id);
    LLAMA2_CHECK(it != set_.held_.end() && it->second.replica == set_.first_remote_ + remote_);
    set_.remote_running_[static_cast<size_t>(remote_)] -= 1;
    set_.remote_reserved_[static_cast<size_t>(remote_)] -= it->second.blocks;
    set_.held_.erase(it);
    events_.on_finished(std::move(done));
  }
  int tokens = 0;

 private:
  ReplicaSet& set_;
  int remote_;
  SchedulerEvents& events_;
};

ReplicaSet::ReplicaSet(StepRunner& local) : ReplicaSet(&local, nullptr, {}, 0, 1) {}

ReplicaSet::ReplicaSet(StepRunner* local, ReplicaLink* link, std::vector<RemoteReplica> remotes,
                       int max_batch, int block_size)
    : local_(local),
      link_(link),
      first_remote_(local != nullptr ? 1 : 0),
      max_batch_(max_batch),
      block_size_(block_size),
      remotes_(std::move(remotes)),
      remote_running_(remotes_.size(), 0),
      remote_reserved_(remotes_.size(), 0),
      outbox_(remotes_.size()),
      heard_ns_(new std::atomic<int64_t>[remotes_.size()]),
      stats_(static_cast<size_t>(first_remote_) + remotes_.size()) {
  LLAMA2_CHECK(!stats_.empty());
  LLAMA2_CHECK(remotes_.empty() || link_ != nullptr);
  for (size_t k = 0; k < remotes_.size(); ++k) {
    heard_ns_[k] = now_ns();
    stats_[static_cast<size_t>(first_remote_) + k].gauges.kv_total = remotes_[k].kv_blocks;
  }
  for (int r = 0; r < size(); ++r) publish(r);
}

int ReplicaSet::free_blocks(int replica) const {
  if (replica < first_remote_) return local_->scheduler().blocks().free_blocks();
  const size_t k = static_cast<size_t>(replica - first_remote_);
  return remotes_[k].kv_blocks - remote_reserved_[k];
}

bool ReplicaSet::fits(int replica, int blocks) const {
  if (replica < first_remote_) return true;  // the local scheduler's try_admit decides
  const size_t k = static_cast<size_t>(replica - first_remote_);
  return remote_running_[k] < max_batch_ && free_blocks(replica) >= blocks;
}

int ReplicaSet::try_admit(SubmitRequest& req) {
  const int blocks = BlockAllocator::blocks_for(static_cast<int>(req.prompt.size()), block_size_);
  // Most free blocks first, the lowest index among equals.
  std::vector<int> order(static_cast<size_t>(size()));
  for (int r = 0; r < size(); ++r) order[static_cast<size_t>(r)] = r;
  // (std::sort with the index as tie-break: libstdc++ 12's stable_sort uses the deprecated
  // get_temporary_buffer, which clang reports.)
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return free_blocks(a) != free_blocks(b) ? free_blocks(a) > free_blocks(b) : a < b;
  });
  for (int r : order) {
    if (!fits(r, blocks)) continue;
    if (r < first_remote_) {
      if (!local_->scheduler().try_admit(req)) continue;
    } else {
      const size_t k = static_cast<size_t>(r - first_remote_);
      outbox_[k].submit(req);
      held_[req.id] = Held{r, blocks, false};
      remote_running_[k] += 1;
      remote_reserved_[k] += blocks;
    }
    stats_[static_cast<size_t>(r)].admitted += 1;
    publish(r);
    return r;
  }
  return -1;
}

ReplicaSet::Held* ReplicaSet::held(int64_t id) {
  const auto it = held_.find(id);
  return it == held_.end() ? nullptr : &it->second;
}

bool ReplicaSet::cancel(const CancelRequest& c, SchedulerEvents& events) {
  if (Held* h = held(c.id)) {
    if (!h->cancel_sent) outbox_[static_cast<size_t>(h->replica - first_remote_)].cancel(c);
    h->cancel_sent = true;
    return true;
  }
  if (local_ == nullptr) return false;
  const bool ok = local_->scheduler().cancel(c, events);
  publish(0);
  return ok;
}

int ReplicaSet::step(SchedulerEvents& events) {
  for (size_t k = 0; k < remotes_.size(); ++k) {
    if (!outbox_[k].empty()) link_->send(remotes_[k].link_rank, outbox_[k].take());
  }
  int generated = 0;
  bool worked = false;
  if (local_ != nullptr && !local_->scheduler().idle()) {
    generated += local_->step(events);
    publish(0);
    worked = true;
  }
  if (link_ != nullptr) {
    std::string bytes;
    int source = 0;
    while (link_->poll(&bytes, &source)) {
      const auto it = std::find_if(remotes_.begin(), remotes_.end(),
                                   [&](const RemoteReplica& r) { return r.link_rank == source; });
      LLAMA2_CHECK(it != remotes_.end());
      const int k = static_cast<int>(it - remotes_.begin());
      heard_ns_[static_cast<size_t>(k)] = now_ns();
      Inbox inbox(*this, k, events);
      read_wire(bytes.data(), bytes.size(), inbox);
      generated += inbox.tokens;
      publish(first_remote_ + k);
      worked = true;
    }
  }
  if (worked) {
    nap_.reset();
  } else if (!held_.empty()) {
    nap_.sleep();  // only remote replicas are busy: wait for their next report
  }
  return generated;
}

bool ReplicaSet::idle() const {
  return held_.empty() && (local_ == nullptr || local_->scheduler().idle());
}

int ReplicaSet::running() const {
  int n = local_ != nullptr ? static_cast<int>(local_->scheduler().running()) : 0;
  for (int x : remote_running_) n += x;
  return n;
}

int ReplicaSet::kv_used() const {
  int n = local_ != nullptr ? local_->scheduler().blocks().used_blocks() : 0;
  for (int x : remote_reserved_) n += x;
  return n;
}

int ReplicaSet::kv_total() const {
  int n = local_ != nullptr ? local_->scheduler().blocks().num_blocks() : 0;
  for (const RemoteReplica& r : remotes_) n += r.kv_blocks;
  return n;
}

int64_t ReplicaSet::preemptions() const {
  int64_t n = local_ != nullptr ? local_->scheduler().preemptions() : 0;
  for (size_t r = static_cast<size_t>(first_remote_); r < stats_.size(); ++r)
    n += stats_[r].gauges.preemptions;
  return n;
}

SpecCounters ReplicaSet::spec_counters() const {
  SpecCounters c = local_ != nullptr ? local_->scheduler().spec_counters() : SpecCounters{};
  for (size_t r = static_cast<size_t>(first_remote_); r < stats_.size(); ++r)
    c += stats_[r].gauges.spec;
  return c;
}

int ReplicaSet::min_kv_blocks() const {
  int n = local_ != nullptr ? local_->scheduler().blocks().num_blocks() : INT32_MAX;
  for (const RemoteReplica& r : remotes_) n = std::min(n, r.kv_blocks);
  return n;
}

void ReplicaSet::publish(int replica) {
  ReplicaStat& s = stats_[static_cast<size_t>(replica)];
  if (replica < first_remote_) {
    s.gauges.running = static_cast<int>(local_->scheduler().running());
    s.gauges.kv_used = local_->scheduler().blocks().used_blocks();
    s.gauges.kv_total = local_->scheduler().blocks().num_blocks();
  }
  if (board_ != nullptr) board_->set(replica, s);
}

void ReplicaSet::shutdown(int exit_code) {
  if (link_ == nullptr) return;
  for (size_t k = 0; k < remotes_.size(); ++k) {
    if (!outbox_[k].empty()) link_->send(remotes_[k].link_rank, outbox_[k].take());
  }
  send_shutdown(*link_, remotes_, exit_code);
}

void send_shutdown(ReplicaLink& link, const std::vector<RemoteReplica>& remotes, int exit_code) {
  for (const RemoteReplica& r : remotes) {
    WireWriter w;
    w.shutdown(exit_code);
    link.send(r.link_rank, w.take());
  }
  link.flush();
}

std::chrono::milliseconds ReplicaSet::longest_silence(int* replica) const {
  *replica = -1;
  int64_t longest = 0;
  const int64_t now = now_ns();
  for (size_t k = 0; k < remotes_.size(); ++k) {
    const int64_t quiet = now - heard_ns_[k].load();
    if (*replica < 0 || quiet > longest) {
      longest = quiet;
      *replica = first_remote_ + static_cast<int>(k);
    }
  }
  return std::chrono::milliseconds(longest / 1000000);
}

}  // namespace llama2
