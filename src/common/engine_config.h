// The engine's configuration as one typed value: built once from a command's flags (and the
// environment's tuning knobs), handed to RankEngine, whose resolve step turns every `auto` and
// every 0-default into a ResolvedConfig for the runners. Strings appear only at the edges: flag
// parsing here, names in messages and reports.
#pragma once

#include <cstdint>
#include <string>

#include "common/speculative_config.h"
#include "common/tuning_knobs.h"

namespace llama2 {

enum class Backend { kAuto, kCpu, kCuda };
// Weights and activations. (Not safetensors' DType, which is a file's element type.)
enum class ComputeDType { kAuto, kFp16, kBf16, kFp32 };
// The KV cache's element type: kAuto keeps the compute dtype; kFp8E4m3 (--kv-cache-dtype fp8 or
// fp8_e4m3) stores one byte per element, for fp16/bf16 on cuda.
enum class KvCacheDType { kAuto, kFp8E4m3 };
// The element type of the projection weights (q|k|v, o, gate|up, down; embeddings, norms and the
// LM head stay in the compute dtype): kAuto keeps the compute dtype (also what --weight-dtype fp16
// or bf16 ask for, when they name it); kFp8 is e4m3 with a scale per output channel, activations
// in fp16/bf16 for the GEMV's few rows (W8A16) and quantized per token above (W8A8 on FP8 tensor
// cores; src/rank/cuda/linear.h); kInt8 is int8 with a scale per output channel and
// fp16/bf16 activations (W8A16). Both are quantized at load, on the GPU, each rank its shard.
// kInt4 is 4 bits with a scale and zero point per group of input columns and fp16/bf16
// activations (W4A16, kernels/gemv_w4.cuh): a 4-bit AWQ/GPTQ checkpoint's packing as stored
// (repacked), or --weight-dtype int4, quantized at load by AWQ's round-to-nearest rule in groups
// of 128.
enum class WeightDType { kAuto, kFp8, kInt8, kInt4 };
// weight_dtype_bytes of kInt4 (and CapacityRequest::linear_bytes): not a whole number of bytes;
// the size is half a byte per weight plus a (scale, bias) pair per group and output row
// (common/capacity.h, shard_weight_bytes).
constexpr int kInt4LinearBytes = -4;

// The names used on the command line and in reports: "auto", "cpu", "cuda", "fp16", ...
const char* to_string(Backend b);
const char* to_string(ComputeDType d);
// The KV cache's element name given the resolved compute dtype: "fp8_e4m3", or the dtype's.
const char* kv_dtype_name(KvCacheDType kv, ComputeDType dtype);
// The weights' element name given the resolved compute dtype: "fp8_e4m3", "int8", "int4", or the
// dtype's.
const char* weight_dtype_name(WeightDType w, ComputeDType dtype);
// Bytes per projection-weight element (1 for fp8/int8, kInt4LinearBytes for int4, else the
// compute dtype's).
int weight_dtype_bytes(WeightDType w, ComputeDType dtype);

// Flag values to enums; Error naming the flag and its allowed values otherwise.
Backend parse_backend(const std::string& s);              // cpu | cuda | auto
ComputeDType parse_compute_dtype(const std::string& s);   // auto | fp16 | bf16 | fp32
KvCacheDType parse_kv_cache_dtype(const std::string& s);  // auto | fp8 | fp8_e4m3
bool parse_prefix_caching(const std::string& s);          // on | off
// auto | fp16 | bf16 | fp8 | fp8_e4m3 | int8 | int4; fp16/bf16 must then equal the resolved --dtype
// (checked by choose_weight_dtype in rank/engine.cpp, which knows it): `requested` keeps the name.
WeightDType parse_weight_dtype(const std::string& s, ComputeDType* requested);

// What an engine is asked for. Every default lives here; a command overrides the step shape
// (max_batch, prefill_chunk) from its table in cli_common.cpp.
struct EngineConfig {
  std::string model_dir;  // config.json, tokenizer.model and the weights
  std::string synthetic;  // "7b" | "13b" | "70b": official shape, random weights made on each
                          // GPU; model_dir then only provides tokenizer.model
  uint64_t synthetic_seed = 1;
  Backend backend = Backend::kAuto;          // auto: cuda when a GPU is visible
  ComputeDType dtype = ComputeDType::kAuto;  // auto: the checkpoint's torch_dtype (cpu: fp32)
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;
  WeightDType weight_dtype = WeightDType::kAuto;
  ComputeDType weight_dtype_named = ComputeDType::kAuto;  // --weight-dtype fp16|bf16: must match
  int block_size = 16;                                    // tokens per KV block, 1..1024
  int kv_cache_blocks = 0;           // --kv-cache-blocks; 0: cuda sizes the cache from free memory,
                                     // cpu allocates what the command's inputs need
  double gpu_memory_fraction = 0.9;  // cuda: share of each GPU's memory this rank may hold
  int max_batch = 1;                 // sequences per step
  int prefill_chunk = 512;           // prompt tokens per step over all sequences (>= 0)
  int max_seq_len = 0;               // 0: the model's max_position_embeddings
  bool cuda_graphs = true;           // replay decode steps as CUDA graphs
  bool prefix_caching = true;        // share the KV blocks of cached prompt prefixes (batch, serve)
  int cpu_threads = 0;               // cpu threads per rank; 0: cpu_threads_for_rank's choice
  // --deterministic (issue 41, docs/deterministic.md): a request's tokens and logits, bit for bit,
  // do not depend on its batch mates, on how its prompt is cut into chunks or on prefix-cache
  // hits, at a given TP degree. The cpu backend honours it (its all-reduce then sums the ranks in
  // rank order at every message size); the cuda backend with 16-bit types (batch-invariant GEMM
  // and attention kernels, rank-order all-reduce), refusing others at start (choose_deterministic).
  bool deterministic = false;
  TuningKnobs knobs;              // the environment's knobs (tuning_knobs_from_env), or a test's
  SpeculativeConfig speculative;  // --speculative (generate, batch, serve); off by default

  // Logit rows one step may ask for (the cuda LM head's rows): one per running sequence, plus K
  // for each sequence that may verify K proposed tokens (docs/speculative.md).
  int max_logit_rows() const { return max_batch + speculative.extra_rows(max_batch); }
  // Tokens one step may carry (the cuda activation buffers' size): the decode rows (with their
  // proposed tokens) plus prefill_chunk prompt tokens.
  int max_step_tokens() const { return max_logit_rows() + prefill_chunk; }
};

// The configuration with every choice made for one model on one machine (RankEngine::resolve):
// what the runners size and dispatch on.
struct ResolvedConfig {
  Backend backend = Backend::kCpu;                    // kCpu | kCuda
  ComputeDType dtype = ComputeDType::kFp32;           // never kAuto
  KvCacheDType kv_cache_dtype = KvCacheDType::kAuto;  // kAuto: the cache holds `dtype`
  WeightDType weight_dtype = WeightDType::kAuto;      // kAuto: projections hold `dtype`
  int max_batch = 1;  // sequences and logit rows per step (EngineConfig::max_logit_rows)
  int max_step_tokens = 2048;
  int max_seq_len = 4096;
  int max_graph_batch = 0;  // decode steps up to this batch run as CUDA graphs; 0: none
  double gpu_memory_fraction = 0.9;
  uint64_t synthetic_seed = 1;
  bool deterministic = false;  // EngineConfig::deterministic, allowed on this backend
  TuningKnobs knobs;
};

}  // namespace llama2
