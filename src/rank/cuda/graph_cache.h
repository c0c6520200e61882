// CUDA graphs of decode steps, one per launch shape: the first step of a shape records its
// launches into a graph, every later one replays it (src/rank/cuda/cuda_model.cu).
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <map>
#include <utility>

namespace llama2 {

class GraphCache {
 public:
  // (batch bucket, context bound): what fixes a decode step's launch shapes.
  using Key = std::pair<int, int>;

  GraphCache() = default;
  ~GraphCache();
  GraphCache(const GraphCache&) = delete;
  GraphCache& operator=(const GraphCache&) = delete;

  // Replays key's graph on stream; the first time, captures what `record` launches on stream
  // (nothing runs then but the replay). An exception from `record` ends the capture, keeps no
  // graph and propagates.
  void launch(const Key& key, cudaStream_t stream, const std::function<void()>& record);

 private:
  std::map<Key, cudaGraphExec_t> graphs_;
};

}  // namespace llama2
