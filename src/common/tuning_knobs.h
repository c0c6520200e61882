// The LLAMA2_* environment knobs (A/B comparisons, profiling, test hooks), read once at start-up
// into one typed value that travels with the engine's configuration. Nothing below the command
// line reads the environment; a test sets the fields it wants.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace llama2 {

// How the CPU backend spreads a step over its threads.
//  kColumns: every operator splits its own work (a product's output columns, attention's (token,
//            KV head) pairs); each weight is read once per step, whatever the batch.
//  kRows:    the step's sequences are divided among the threads, and each thread takes its rows
//            through every layer; threads meet only at the tensor-parallel all-reduces. Each
//            thread reads every weight, so this pays only while the weights stay in each core's
//            own L2 cache, where the per-operator fork/join would cost more than the work.
//  kAuto:    kRows when this rank's weights fit in one core's L2 and the sequences divide evenly
//            enough; kColumns otherwise.
// A row's results are bit-identical under all three (each output is one multiply-add chain).
enum class CpuSplit { kAuto, kColumns, kRows };

// Which CUDA decode attention kernel runs (kernels/decode_plan.cuh's DecodeKernel).
enum class DecodeKernelChoice { kAuto, kBlock, kWarp };
// Which CUDA prefill attention kernel runs (kernels/attention_prefill.cuh's PrefillKernel).
enum class PrefillKernelChoice { kAuto, kWmma, kMma };
// How the CUDA GEMV multiplies 1-byte weights (--weight-dtype fp8 | int8; kernels/gemv.cuh's
// GemvMath): kAuto the default (fp32 FMAs after cheap conversions), kHalf2 f16x2 products for fp16
// models, kOld the path before 2026-12-02 (generic conversions; fp8 with per-token fp8
// activations, a quantize launch before every GEMV), kept for the A/B.
enum class QgemvChoice { kAuto, kHalf2, kOld };

// A test hook (LLAMA2_TEST_STALL=STEP[:RANK[:MS]]): world rank RANK (default 0) sleeps MS
// milliseconds (default 0: for ever) at the start of its engine's step STEP (steps count from 1,
// per replica), to exercise the step watchdog on any backend and at any TP degree, TP 1 included.
struct StallHook {
  int64_t step = 0;  // 0: off
  int rank = 0;
  int64_t ms = 0;  // 0: for ever
};
// Parses the variable's value ("" or null: off); Error naming the expected form otherwise.
StallHook parse_stall_hook(const char* text);

// The largest LLAMA2_GEMV value: kernels::kGemvMaxRows (cuda_model.cu asserts they agree).
constexpr int kGemvKnobMaxRows = 8;
// The largest LLAMA2_SKINNY_ROWS value: kernels::kSkinnyMaxRows (linear.cu asserts they agree).
constexpr int kSkinnyKnobMaxRows = 64;

// Every field's default is the engine's normal behaviour; the comment names the variable.
struct TuningKnobs {
  // LLAMA2_GEMV=0..8: products of up to N rows use the GEMV kernel, 0 sends every product to
  // cuBLAS. Default 1: measured on an H200 (benchmarks/RESULTS.md, 7B decode), the GEMV kernel
  // matches or slightly beats cuBLAS for one row and loses from two rows on.
  int gemv_rows = 1;
  // LLAMA2_W8A16_ROWS=0..1048576 (--weight-dtype int8, cuda): products of more rows than the GEMV
  // takes and at most N rows use the tensor-core W8A16 GEMM; more rows dequantize W and call
  // cuBLAS (0: always). Default 64: at 7B shapes on an H200 (llama2_bench_kernels w8a16,
  // 2026-12-02) the W8A16 GEMM with 32-row tiles beat dequantize + cuBLAS by 1.6x at 64 rows
  // (183 vs 290 us a layer) and lost at 256 (378 vs 325).
  int w8a16_rows = 64;
  // LLAMA2_SKINNY_ROWS=0..64 (16-bit weights, cuda): narrow products (o and down: output tiles
  // for at most half the GPU) of more rows than the GEMV takes and at most N rows use the skinny
  // tensor-core GEMM (kernels/gemm_skinny.cuh: K split over a thread-block cluster) instead of
  // cuBLAS; 0: cuBLAS. Default 16: on one H200 (7B fp16, 2026-12-02, two alternating rounds) 32
  // against 0 gave batches 2 / 4 / 8 / 16 / 32 +1.1 / +1.3 / +1.0 / +0.5 / -1.0%.
  int skinny_rows = 16;
  // LLAMA2_W8A16_FP8=0|1 (--weight-dtype fp8, cuda; an A/B): the same rows go to the W8A16 GEMM
  // with e4m3 weights and x unquantized instead of cuBLASLt's FP8 GEMM.
  bool fp8_w8a16 = false;
  // LLAMA2_FP8_TUNE=0|1 (--weight-dtype fp8, cuda; an A/B): at start-up, time cuBLASLt's candidate
  // FP8 algorithms for each projection shape and row count the engine runs and keep the fastest
  // (rank/cuda/fp8_gemm.h). Default 0, cuBLASLt's heuristic choice, the same on every run: on one
  // H200 (7B, 2026-12-02) the fastest candidate beat it by 0-18% per product at 64 rows, 0-2% end
  // to end, and a timed choice can differ from run to run. 13B fp8 `serve` saturation (2026-12-02,
  // two rounds each): 12,758 / 12,787 tok/s with it, 12,840 / 12,747 without.
  bool fp8_tune = false;
  // LLAMA2_FP8_FUSE=0|1 (--weight-dtype fp8, cuda): the kernels that produce a W8A8 product's
  // input (the RMSNorms, the gate|up SwiGLU) also write it in e4m3, instead of a quantize launch
  // before each product (CudaLinear::fp8_rows); the same numbers either way. 0: the launches.
  bool fp8_fuse = true;
  bool pdl = true;  // LLAMA2_PDL=0|1: programmatic dependent launch (cuda)
  // LLAMA2_FUSE_NORM=0|1 (cuda, one rank): one-row steps fold each RMSNorm into the GEMV that
  // reads it and each residual add into the GEMV that writes it (kernels/gemv.cuh, GemvFusion;
  // the same numbers bit for bit). Default 0: on one H200 (7B batch 1, 2026-12-02) it was slower
  // (fp16 251.6 vs 254.7 tok/s, fp8 383.5 vs 403.6): every GEMV block then normalizes the row
  // before its first weight load, on the critical path, which costs more than the launch saved.
  bool fuse_norm = false;
  // LLAMA2_FUSE_ROPE=0|1 (cuda): one-row steps rotate q and k and write the KV cache in the qkv
  // GEMV's epilogue (GemvFusion::rope) instead of a launch_rope_kv per layer; the same numbers.
  bool fuse_rope = true;
  // LLAMA2_GEMV_PREFETCH_KB=0..1048576 (cuda): KiB of weights a GEMV launch asks L2 for before
  // waiting on the previous kernel (kernels/gemv_common.cuh); 0: none (the default: 24 MB cost
  // 4-6% at batch 1 on an H200, 2 MB was within noise; benchmarks/RESULTS.md, 2026-12-02).
  int gemv_prefetch_kb = 0;
  DecodeKernelChoice decode_kernel = DecodeKernelChoice::kAuto;  // LLAMA2_DECODE_KERNEL
  // LLAMA2_DECODE_MIN_PARTITION=0|32|64|128|256|512 (cuda, an A/B): decode attention splits a
  // context into partitions of no fewer positions than this (kernels/decode_plan.cuh); 0: the
  // plan's own floor (64 for the block kernel, 32 for the warp kernel). One H200, 7B, contexts
  // 129-192 (2026-12-02): 256 (one partition, no merge) cost 2.4% at fp16 batch 1 and 4.1% with
  // fp8 weights; the rule stays.
  int decode_min_partition = 0;
  PrefillKernelChoice prefill_kernel = PrefillKernelChoice::kAuto;  // LLAMA2_PREFILL_KERNEL
  QgemvChoice qgemv = QgemvChoice::kAuto;                           // LLAMA2_QGEMV
  bool warmup = true;        // LLAMA2_WARMUP=0|1: warm-up steps at start-up (cuda)
  bool mixed_decode = true;  // LLAMA2_MIXED_DECODE=0|1: decode kernel for mixed steps' rows
  // LLAMA2_PREFILL_SPLIT=0|1 (cuda): the prefill kernel splits the keys of a grid that fills at
  // most half the GPU (a few new tokens over a long cache: a prefix-cache hit) over more blocks,
  // merged by log-sum-exp (kernels/attention_prefill.cuh); 0: one block per query tile.
  bool prefill_split = true;
  bool op_profile = false;       // LLAMA2_OP_PROFILE=0|1: per-op GPU times per step (stderr)
  bool custom_allreduce = true;  // LLAMA2_CUSTOM_ALLREDUCE=0|1: one-shot all-reduce (cuda, TP)
  // LLAMA2_FUSE_ALLREDUCE_NORM=0|1 (cuda, TP > 1 with the one-shot all-reduce): the reduction
  // after o and down fused with the residual add and the next RMSNorm in one launch
  // (kernels::launch_allreduce_add_rmsnorm; the same numbers bit for bit, 64 launches fewer per
  // 7B token at batch 1-2). Default 0 until the two-GPU node measures it (issue 21); its kernel
  // test runs two ranks on streams of one GPU.
  bool fuse_allreduce_norm = false;
  CpuSplit cpu_split = CpuSplit::kAuto;  // LLAMA2_CPU_SPLIT=auto|columns|rows
  bool full_logits = false;  // LLAMA2_FULL_LOGITS=0|1: gather full logit rows, never top-k
  std::string step_log;      // LLAMA2_STEP_LOG=PATH: one line per step on rank 0; "": off
  StallHook test_stall;      // LLAMA2_TEST_STALL=STEP[:RANK[:MS]]
  // LLAMA2_TEST_STEP_DELAY_MS=N (test hook): every engine step sleeps N ms on each replica's
  // first rank, so that tests can hold requests running on the tiny model; 0: off.
  int test_step_delay_ms = 0;
  // LLAMA2_TEST_RANKS_PER_NODE=K (test hook): world rank r counts as being on node r / K for the
  // data-parallel layout's one-node-per-replica check; 0: the host name decides.
  int test_ranks_per_node = 0;
  // LLAMA2_HTTP_THREAD_NICE=1..19: the HTTP front's connection threads lower their own priority by
  // this much (setpriority), so that a thousand of them waking at each step cannot delay the
  // engine thread; 0: unchanged (an A/B switch, benchmarks/http/gpu_http_vs_socket.sh).
  int http_thread_nice = 0;
  // LLAMA2_TEST_HTTP_START_DELAY_MS=N (test hook): serve's rank 0 waits N ms after binding the
  // HTTP port and before loading the model, so tests see the front's "starting" answers; 0: off.
  int test_http_start_delay_ms = 0;
};

// Looks a variable up: its value, or nullptr when unset.
using EnvLookup = std::function<const char*(const char*)>;
// Reads every knob through `env`; an unset or empty variable keeps the default. Error naming the
// variable, its value and the allowed values for anything else.
TuningKnobs parse_tuning_knobs(const EnvLookup& env);
// parse_tuning_knobs over this process's environment.
TuningKnobs tuning_knobs_from_env();

}  // namespace llama2
