// The CUDA backend's entry points in a build without CUDA (no nvcc/NCCL, or -DLLAMA2_CUDA=OFF):
// choose_backend never selects it, and an explicit request gets a message instead of a link error.
#ifndef LLAMA2_HAVE_CUDA
#include "common/check.h"
#include "rank/model_runner.h"

namespace llama2 {

bool cuda_backend_built() {
  return false;
}

std::unique_ptr<ModelRunner> make_cuda_runner(const ModelConfig&, const ShardPlan&,
                                              const ResolvedConfig&, const CudaPlacement&) {
  throw Error("this build has no CUDA backend");
}

}  // namespace llama2
#endif
