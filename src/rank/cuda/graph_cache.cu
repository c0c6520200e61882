#include "common/check.h"
#include "rank/cuda/graph_cache.h"

namespace llama2 {

GraphCache::~GraphCache() {
  for (auto& [key, exec] : graphs_) (void)cudaGraphExecDestroy(exec);
}

void GraphCache::launch(const Key& key, cudaStream_t stream, const std::function<void()>& record) {
  auto it = graphs_.find(key);
  if (it == graphs_.end()) {
    cudaGraph_t graph = nullptr;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      record();
    } catch (...) {
      (void)cudaStreamEndCapture(stream, &graph);
      if (graph != nullptr) (void)cudaGraphDestroy(graph);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t rc = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    CUDA_CHECK(rc);
    it = graphs_.emplace(key, exec).first;
  }
  CUDA_CHECK(cudaGraphLaunch(it->second, stream));
}

}  // namespace llama2
