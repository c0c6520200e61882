#include "rank/step_heartbeat.h"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <new>
#include <sstream>

#include "common/check.h"

namespace llama2 {

// One cache line per rank, so that ranks writing their own slot do not share a line.
struct alignas(64) StepHeartbeat::Slot {
  std::atomic<int64_t> step{0}, step_done{0}, point{0}, since_ns{0}, step_ns{0};
  std::atomic<int32_t> inside{0}, kind{0}, pid{0};
};
// The slots are shared between processes: only lock-free atomics are plain memory there.
static_assert(std::atomic<int64_t>::is_always_lock_free &&
                  std::atomic<int32_t>::is_always_lock_free,
              "heartbeat counters must be lock-free to live in shared memory");

int64_t StepHeartbeat::now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

StepHeartbeat::StepHeartbeat(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node_));
  int node_rank = 0, node_size = 1;
  MPI_CHECK(MPI_Comm_rank(node_, &node_rank));
  MPI_CHECK(MPI_Comm_size(node_, &node_size));
  // Node-local rank 0 holds the node's slots; every rank of the node maps them.
  void* base = nullptr;
  // One slot of slack: the window's base need not be aligned to a cache line.
  const MPI_Aint bytes = node_rank == 0 ? static_cast<MPI_Aint>((node_size + 1) * sizeof(Slot)) : 0;
  MPI_CHECK(MPI_Win_allocate_shared(bytes, static_cast<int>(sizeof(Slot)), MPI_INFO_NULL, node_,
                                    &base, &win_));
  // Plain loads and stores see each other only in the unified memory model (MPI-3 11.4.1); the
  // separate model would need MPI_Win_sync, an MPI call the watchdog thread may not make.
  int* model = nullptr;
  int has_model = 0;
  MPI_CHECK(MPI_Win_get_attr(win_, MPI_WIN_MODEL, &model, &has_model));
  const bool unified = has_model != 0 && *model == MPI_WIN_UNIFIED;
  MPI_Aint got = 0;
  int disp = 0;
  void* node_base = nullptr;
  MPI_CHECK(MPI_Win_shared_query(win_, 0, &got, &disp, &node_base));
  // Every process maps the segment at a page boundary, so the padding is the same in all of them.
  const auto at = reinterpret_cast<uintptr_t>(node_base);
  Slot* slots = reinterpret_cast<Slot*>((at + alignof(Slot) - 1) / alignof(Slot) * alignof(Slot));
  if (unified && node_rank == 0) {
    for (int i = 0; i < node_size; ++i) new (&slots[i]) Slot();
  }
  MPI_CHECK(MPI_Barrier(node_));  // slots constructed before anyone writes
  std::vector<int> node_ranks(static_cast<size_t>(node_size));
  MPI_CHECK(MPI_Allgather(&rank, 1, MPI_INT, node_ranks.data(), 1, MPI_INT, node_));
  if (unified) {
    mine_ = &slots[node_rank];
  } else {
    own_ = std::make_unique<Slot>();
    mine_ = own_.get();
  }
  mine_->pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
  if (rank == 0) {
    by_rank_.assign(static_cast<size_t>(size), nullptr);
    if (unified) {
      for (int i = 0; i < node_size; ++i) by_rank_[static_cast<size_t>(node_ranks[i])] = &slots[i];
    } else {
      by_rank_[0] = mine_;
    }
  }
}

StepHeartbeat::~StepHeartbeat() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (win_ != MPI_WIN_NULL) MPI_Win_free(&win_);
  if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
}

void StepHeartbeat::begin_step(int64_t step) {
  const int64_t t = now_ns();
  mine_->step_ns.store(t, std::memory_order_relaxed);
  mine_->since_ns.store(t, std::memory_order_relaxed);
  // Release: a reader that sees the new step also sees its start time (no false "overdue").
  mine_->step.store(step, std::memory_order_release);
}

void StepHeartbeat::end_step(int64_t step) {
  mine_->since_ns.store(now_ns(), std::memory_order_relaxed);
  mine_->step_done.store(step, std::memory_order_release);
}

void StepHeartbeat::arrive(SyncPoint kind) {
  mine_->since_ns.store(now_ns(), std::memory_order_relaxed);
  mine_->kind.store(static_cast<int32_t>(kind), std::memory_order_relaxed);
  mine_->inside.store(1, std::memory_order_relaxed);
  mine_->point.fetch_add(1, std::memory_order_release);
}

void StepHeartbeat::pass() {
  mine_->since_ns.store(now_ns(), std::memory_order_relaxed);
  mine_->inside.store(0, std::memory_order_release);
}

namespace {

RankBeat read_slot(const std::atomic<int64_t>& step_done, const std::atomic<int64_t>& step,
                   const std::atomic<int64_t>& step_ns) {
  RankBeat b;
  b.observable = true;
  b.step_done = step_done.load(std::memory_order_acquire);
  b.step = step.load(std::memory_order_acquire);
  b.step_ns = step_ns.load(std::memory_order_relaxed);
  return b;
}

// The process state letter of /proc/PID/stat (R, S, D, T, t, Z, ...); '?' when the process is
// gone; 0 when /proc could not be read for another reason (no file descriptor left: rank 0 at its
// limit must not take its peers for dead).
char process_state(int pid) {
  if (pid <= 0) return 0;
  if (::kill(pid, 0) != 0 && errno == ESRCH) return '?';
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return ::kill(pid, 0) != 0 && errno == ESRCH ? '?' : 0;
  // "pid (comm) S ...": comm may hold spaces and parentheses, the state follows the last ')'.
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : 0;
}

}  // namespace

RankBeat StepHeartbeat::self() const {
  RankBeat b = read_slot(mine_->step_done, mine_->step, mine_->step_ns);
  b.pid = mine_->pid.load(std::memory_order_relaxed);
  return b;
}

std::vector<RankBeat> StepHeartbeat::snapshot() const {
  std::vector<RankBeat> out(by_rank_.size());
  for (size_t r = 0; r < by_rank_.size(); ++r) {
    const Slot* s = by_rank_[r];
    if (s == nullptr) continue;
    RankBeat& b = out[r];
    b = read_slot(s->step_done, s->step, s->step_ns);
    b.point = s->point.load(std::memory_order_acquire);
    b.inside = s->inside.load(std::memory_order_acquire) != 0;
    b.kind = static_cast<SyncPoint>(s->kind.load(std::memory_order_relaxed));
    b.since_ns = s->since_ns.load(std::memory_order_relaxed);
    b.pid = s->pid.load(std::memory_order_relaxed);
    b.run_state = process_state(b.pid);
  }
  return out;
}

namespace {

const char* point_name(SyncPoint k) {
  switch (k) {
    case SyncPoint::kPlan:
      return "the plan hand-over";
    case SyncPoint::kAllReduce:
      return "an all-reduce";
    case SyncPoint::kGather:
      return "the logits gather";
    case SyncPoint::kNone:
      break;
  }
  return "no synchronizing point";
}

std::string seconds(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(std::max<int64_t>(ns, 0)) / 1e9);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

// What a rank (or several in the same state: `plural`) is doing, from its own counters: "waits in
// an all-reduce of step 7".
std::string activity(const RankBeat& b, bool plural = false) {
  const char* wait = plural ? "wait" : "waits";
  if (b.inside && b.kind == SyncPoint::kPlan && b.step == b.step_done)
    return std::string(wait) + " for the plan of step " + std::to_string(b.step_done + 1);
  if (b.inside) {
    return std::string(wait) + " in " + point_name(b.kind) + " of step " + std::to_string(b.step);
  }
  if (b.step > b.step_done)
    return std::string(plural ? "compute" : "computes") + " step " + std::to_string(b.step);
  return std::string(plural ? "are" : "is") + " between steps (last finished " +
         std::to_string(b.step_done) + ")";
}

bool exited(char run_state) {
  return run_state == 'Z' || run_state == 'X' || run_state == '?';
}

// A process state that explains a stall by itself, or "".
std::string process_verdict(const RankBeat& b) {
  if (exited(b.run_state)) return "has exited";
  switch (b.run_state) {
    case 'T':
    case 't':
      return "is stopped (SIGSTOP or a debugger)";
    case 'D':
      return "is blocked in the kernel (uninterruptible sleep: a driver or I/O)";
    default:
      return "";
  }
}

}  // namespace

std::string describe_stall(const std::vector<RankBeat>& ranks, int64_t now_ns) {
  std::vector<int> seen, unseen;
  for (size_t r = 0; r < ranks.size(); ++r)
    (ranks[r].observable ? seen : unseen).push_back(static_cast<int>(r));
  std::ostringstream out;
  if (seen.empty()) return "no rank's progress is observable from rank 0";
  // Progress along the common sequence of points: inside point p < past point p < inside p + 1.
  auto progress = [&](int r) { return 2 * ranks[r].point + (ranks[r].inside ? 0 : 1); };
  int64_t lo = progress(seen[0]), hi = lo;
  for (int r : seen) {
    lo = std::min(lo, progress(r));
    hi = std::max(hi, progress(r));
  }
  auto describe = [&](int r) {
    const RankBeat& b = ranks[r];
    std::string s = "rank " + std::to_string(r) + " (pid " + std::to_string(b.pid) + ")";
    const std::string verdict = process_verdict(b);
    if (!verdict.empty()) s += " " + verdict + ";";
    return s + " " + activity(b) + ", unchanged for " + seconds(now_ns - b.since_ns);
  };
  // A process that is stopped or gone is the answer whatever the counters say.
  std::vector<int> culprits;
  for (int r : seen)
    if (!process_verdict(ranks[r]).empty()) culprits.push_back(r);
  if (culprits.empty()) {
    for (int r : seen)
      if (lo != hi && progress(r) == lo) culprits.push_back(r);
  }
  if (!culprits.empty()) {
    for (size_t i = 0; i < culprits.size(); ++i) out << (i ? "; " : "") << describe(culprits[i]);
    // The others, grouped by what they do (in rank order of each group's first rank).
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int r : seen) {
      if (std::find(culprits.begin(), culprits.end(), r) != culprits.end()) continue;
      const std::string what = activity(ranks[r]);
      auto g = std::find_if(groups.begin(), groups.end(),
                            [&](const auto& x) { return x.first == what; });
      if (g == groups.end()) g = groups.insert(groups.end(), {what, {}});
      g->second.push_back(r);
    }
    for (const auto& [what, members] : groups)
      out << "; " << rank_list(members) << " " << activity(ranks[members[0]], members.size() > 1);
  } else if (seen.size() == 1 && unseen.empty()) {
    out << describe(seen[0]) << ": its own computation (or its GPU) does not finish";
  } else if (ranks[seen[0]].inside) {
    out << "every observable rank " << activity(ranks[seen[0]])
        << ": none is behind on the host (a stuck transport, or a rank not observable here)";
  } else {
    out << "every observable rank " << activity(ranks[seen[0]])
        << " and none reached its next synchronizing point (a stuck computation or GPU on every "
           "rank, or a hung collective on the GPU)";
  }
  if (!unseen.empty())
    out << "; " << rank_list(unseen) << " not observable from rank 0 (another node)";
  return out.str();
}

std::string exited_ranks(const std::vector<RankBeat>& ranks) {
  std::string out;
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankBeat& b = ranks[r];
    if (!b.observable || b.pid <= 0 || !exited(b.run_state)) continue;
    out += (out.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " (pid " +
           std::to_string(b.pid) + ")";
  }
  return out;
}

}  // namespace llama2
