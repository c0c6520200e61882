#include <cstdio>
#include <cstring>
#include <utility>

#include "common/check.h"
#include "rank/cuda/op_profiler.h"

namespace llama2 {

OpProfiler::~OpProfiler() {
  for (cudaEvent_t e : events_) (void)cudaEventDestroy(e);
}

void OpProfiler::mark(const char* op, cudaStream_t stream) {
  if (ops_.size() == events_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(events_[ops_.size()], stream));
  ops_.push_back(op);
}

void OpProfiler::report(const std::string& shape, cudaStream_t stream) {
  mark("end", stream);
  CUDA_CHECK(cudaEventSynchronize(events_[ops_.size() - 1]));
  // Totals per op name in order of first appearance (a step has ~15 distinct ops).
  std::vector<std::pair<const char*, float>> totals;
  float all = 0.f;
  for (size_t i = 0; i + 1 < ops_.size(); ++i) {
    float ms = 0.f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i], events_[i + 1]));
    all += ms;
    size_t j = 0;
    while (j < totals.size() && std::strcmp(totals[j].first, ops_[i]) != 0) ++j;
    if (j == totals.size()) totals.emplace_back(ops_[i], 0.f);
    totals[j].second += ms;
  }
  std::string line = "op-profile rank " + std::to_string(rank_) + ": " + shape + " |";
  char buf[64];
  for (const auto& [op, ms] : totals) {
    std::snprintf(buf, sizeof(buf), " %s %.3f", op, ms);
    line += buf;
  }
  std::snprintf(buf, sizeof(buf), " | total %.3f ms\n", all);
  line += buf;
  std::fputs(line.c_str(), stderr);
  ops_.clear();
}

}  // namespace llama2
