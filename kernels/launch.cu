// The programmatic-dependent-launch switch read by launch_kernel (dtype.cuh). One value per
// process: the attribute is a property of how this process launches, and the CUDA runner sets it
// once from its TuningKnobs before launching anything. Atomic, since a test or benchmark may flip
// it between runs while no kernel is being launched.
#include <atomic>

#include "kernels/dtype.cuh"

namespace llama2::kernels {
namespace {
std::atomic<bool> programmatic_launch_on{true};
std::atomic<int64_t> prefetch_budget{0};
}  // namespace

void set_gemv_prefetch_budget(int64_t bytes) {
  prefetch_budget.store(bytes, std::memory_order_relaxed);
}

int64_t gemv_prefetch_budget() {
  return prefetch_budget.load(std::memory_order_relaxed);
}

void set_programmatic_launch(bool on) {
  programmatic_launch_on.store(on, std::memory_order_relaxed);
}

bool programmatic_launch() {
  return programmatic_launch_on.load(std::memory_order_relaxed);
}

}  // namespace llama2::kernels
