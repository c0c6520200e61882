// The step-plan channel (rank/comm.h): rank 0 sends each worker the plan's words; a worker waits
// for them with MPI_Iprobe, spinning right after a step and napping once idle.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "common/check.h"
#include "rank/comm.h"
#include "rank/step_heartbeat.h"

namespace llama2 {
namespace {
constexpr int kPlanTag = 1;
}

PlanChannel::PlanChannel(MPI_Comm comm, StepHeartbeat* beat) : beat_(beat) {
  // A communicator of its own: plan messages can never match a collective's or anyone else's
  // point-to-point traffic.
  MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

PlanChannel::~PlanChannel() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void PlanChannel::send(const std::vector<int32_t>& words) {
  send_each([&words](int) -> const std::vector<int32_t>& { return words; });
}

void PlanChannel::send(const std::vector<std::vector<int32_t>>& per_rank) {
  LLAMA2_CHECK(static_cast<int>(per_rank.size()) == size_);
  send_each([&per_rank](int r) -> const std::vector<int32_t>& {
    return per_rank[static_cast<size_t>(r)];
  });
}

template <typename WordsOf>
void PlanChannel::send_each(const WordsOf& words_of) {
  LLAMA2_CHECK(rank_ == 0);
  if (beat_) beat_->arrive(SyncPoint::kPlan);
  requests_.assign(static_cast<size_t>(size_ - 1), MPI_REQUEST_NULL);
  for (int r = 1; r < size_; ++r) {
    const std::vector<int32_t>& words = words_of(r);
    LLAMA2_CHECK(words.size() <= static_cast<size_t>(INT_MAX));
    MPI_CHECK(MPI_Isend(words.data(), static_cast<int>(words.size()), MPI_INT32_T, r, kPlanTag,
                        comm_, &requests_[static_cast<size_t>(r - 1)]));
  }
  // Rank 0's part of the hand-over is done once the sends are posted: if a worker never takes its
  // plan, the heartbeat shows that worker behind rather than both sides waiting at one point.
  if (beat_) beat_->pass();
  MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
}

namespace {
// CPU time of the calling thread: the spin budget counts only time this rank actually ran, so a
// worker that was descheduled (an oversubscribed node) does not start napping in the middle of a
// busy stream of steps.
int64_t thread_cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}
}  // namespace

void PlanChannel::receive(std::vector<int32_t>* words) {
  LLAMA2_CHECK(rank_ != 0);
  if (beat_) beat_->arrive(SyncPoint::kPlan);
  const int64_t spin_until = thread_cpu_ns() + std::chrono::nanoseconds(kSpin).count();
  auto nap = kFirstNap;
  MPI_Status status{};
  bool spinning = true;
  for (int polls = 1, flag = 0;; ++polls) {
    MPI_CHECK(MPI_Iprobe(0, kPlanTag, comm_, &flag, &status));
    if (flag) break;
    if (spinning) {
      // The thread's CPU clock is a system call: read it every 64 polls.
      if (polls % 64 != 0 || thread_cpu_ns() < spin_until) continue;
      spinning = false;
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, kMaxNap);
  }
  int n = 0;
  MPI_CHECK(MPI_Get_count(&status, MPI_INT32_T, &n));
  LLAMA2_CHECK(n >= 0);
  words->resize(static_cast<size_t>(n));
  MPI_CHECK(MPI_Recv(words->data(), n, MPI_INT32_T, 0, kPlanTag, comm_, MPI_STATUS_IGNORE));
  if (beat_) beat_->pass();
}

}  // namespace llama2
