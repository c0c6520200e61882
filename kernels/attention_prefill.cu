#include <mma.h>

#include <climits>
#include <cmath>
#include <string>
#include <type_traits>

#include "common/check.h"
#include "kernels/attention_prefill.cuh"
#include "kernels/attention_prefill_mma.cuh"
#include "kernels/dtype.cuh"

namespace llama2::kernels {

namespace {

constexpr int kBQ = 64;  // query rows per block
constexpr int kBK = 64;  // keys per tile
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpRows = kBQ / kWarps;  // 16: one WMMA row block per warp
static_assert(kWarpRows == 16, "each warp owns one 16-row WMMA block");

// fp16/bf16 use tensor cores (WMMA) with O in registers; fp32 uses plain FMA loops with O in shared
// memory (a validation path).
template <typename T>
constexpr bool kTensorCores = !std::is_same_v<T, float>;

// Shared-memory layout. Each row is padded by 16 bytes so that consecutive rows start in different
// banks (a 16-row fragment load touches 16 rows). WMMA needs fragment pointers 32-byte aligned and
// leading dimensions that are multiples of 16 bytes; with 16-row blocks and 16-column steps every
// pointer below is a multiple of 32 bytes from a 128-byte aligned region start.
// Tensor-core path: Q lives in registers after the prologue, so the scores reuse the Q tile, and
// the final O is staged through the K/V tiles: fp16 d = 128 needs 64 KB (3 blocks per SM).
template <typename T, int D>
struct Smem {
  static constexpr bool kTC = kTensorCores<T>;
  static constexpr int kPad = kVec16<T>;
  static constexpr int kLdX = D + kPad;    // Q, K, V tiles [rows][kLdX] of T
  static constexpr int kLdS = kBK + 4;     // scores [kBQ][kLdS] fp32
  static constexpr int kLdP = kBK + kPad;  // probabilities [kBQ][kLdP] of T
  static constexpr int kLdO = D + 4;       // output accumulator [kBQ][kLdO] fp32
  static constexpr size_t align(size_t b) { return (b + 127) / 128 * 128; }
  static constexpr size_t kQBytes = align(sizeof(T) * kBQ * kLdX);
  static constexpr size_t kSBytes = align(sizeof(float) * kBQ * kLdS);
  static constexpr size_t kXBytes = align(sizeof(T) * kBK * kLdX);
  static constexpr size_t kQ = 0;
  static constexpr size_t kS = kTC ? 0 : kQBytes;
  static constexpr size_t kK = kTC ? (kQBytes > kSBytes ? kQBytes : kSBytes) : kQBytes + kSBytes;
  static constexpr size_t kV = kK + kXBytes;
  static constexpr size_t kP = kV + kXBytes;
  static constexpr size_t kO = kTC ? kK : kP + align(sizeof(T) * kBQ * kLdP);
  static constexpr size_t kRow =
      kTC ? kP + align(sizeof(T) * kBQ * kLdP) : kO + align(sizeof(float) * kBQ * kLdO);
  static constexpr size_t kKeyRows = kRow + align(sizeof(float) * 3 * kBQ);  // m, l, alpha
  static constexpr size_t kRowMap = kKeyRows + align(sizeof(int32_t) * kBK);
  static constexpr size_t kBytes = kRowMap + align(sizeof(float) * 16 * 16);
  static_assert(!kTC || kO + sizeof(float) * kBQ * kLdO <= kP, "O staging must fit in K and V");
};

template <typename T, typename C>
struct PrefillParams {
  const T* q;
  int64_t q_stride;
  const C* k_cache;  // [num_blocks, kv_heads, block_size, D], T or fp8 e4m3
  const C* v_cache;
  int kv_heads;
  int block_size;
  const int32_t* block_tables;  // [num_seqs, max_blocks]
  int max_blocks;
  const int32_t* cu_tokens;
  const int32_t* pos_begin;
  int heads;
  int group;
  float scale;
  T* out;  // [n_tokens, heads, D]
};

// One warp's share of the work: rows [warp * 16, warp * 16 + 16) of the query tile. The two
// specialisations keep the product and the O accumulator where their path wants them; the kernel
// around them (gather, softmax, epilogue) is shared.
template <typename T, int D, bool kTC = kTensorCores<T>>
struct WarpTile;

// Tensor cores. The accumulator fragment's element -> (row, col) mapping is unspecified but fixed
// for the fragment type: loading a 16x16 matrix whose entries are their own row numbers tells each
// lane the row of each of its elements, which is all the per-row rescaling needs.
template <typename T, int D>
struct WarpTile<T, D, true> {
  using L = Smem<T, D>;
  using Acc = nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float>;
  nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, T, nvcuda::wmma::row_major> q[D / 16];
  Acc o[D / 16];
  int row_of[Acc::num_elements];

  // qs: the Q tile; row_map: [16][16] fp32 with row_map[r][c] = r. Both complete (after a barrier).
  __device__ void init(const T* qs, const float* row_map, int warp) {
    using namespace nvcuda;
#pragma unroll
    for (int k = 0; k < D / 16; ++k)
      wmma::load_matrix_sync(q[k], qs + warp * kWarpRows * L::kLdX + k * 16, L::kLdX);
    Acc rows;
    wmma::load_matrix_sync(rows, row_map, 16, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < Acc::num_elements; ++i) row_of[i] = static_cast<int>(rows.x[i]);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(o[n], 0.f);
  }

  // S[warp rows][0:kBK] = Q . K^T (raw dot products, fp32).
  __device__ void qk(const T* ks, float* ss, int warp) {
    using namespace nvcuda;
#pragma unroll
    for (int n = 0; n < kBK / 16; ++n) {
      Acc acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int k = 0; k < D / 16; ++k) {
        // B = K^T: B(kk, nn) = K[n*16 + nn][k*16 + kk], i.e. column-major with leading dim kLdX.
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, ks + n * 16 * L::kLdX + k * 16, L::kLdX);
        wmma::mma_sync(acc, q[k], kf, acc);
      }
      wmma::store_matrix_sync(ss + warp * kWarpRows * L::kLdS + n * 16, acc, L::kLdS,
                              wmma::mem_row_major);
    }
  }

  // O[r, :] *= alpha[r] for the warp's rows (alpha: this warp's 16 entries).
  __device__ void rescale(const float* alpha, int /*lane*/) {
    float a[Acc::num_elements];
#pragma unroll
    for (int i = 0; i < Acc::num_elements; ++i) a[i] = alpha[row_of[i]];
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
#pragma unroll
      for (int i = 0; i < Acc::num_elements; ++i) o[n].x[i] *= a[i];
    }
  }

  // O += P[warp rows][0:kBK] . V[0:kBK][0:D].
  __device__ void pv(const T* ps, const T* vs, int warp) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf[kBK / 16];
#pragma unroll
    for (int k = 0; k < kBK / 16; ++k) {
      wmma::load_matrix_sync(pf[k], ps + warp * kWarpRows * L::kLdP + k * 16, L::kLdP);
    }
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
#pragma unroll
      for (int k = 0; k < kBK / 16; ++k) {
        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
        wmma::load_matrix_sync(vf, vs + k * 16 * L::kLdX + n * 16, L::kLdX);
        wmma::mma_sync(o[n], pf[k], vf, o[n]);
      }
    }
  }

  // The warp's O rows into os (the staging area over K and V: call after a block barrier).
  __device__ void finish(float* os, int warp) {
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      nvcuda::wmma::store_matrix_sync(os + warp * kWarpRows * L::kLdO + n * 16, o[n], L::kLdO,
                                      nvcuda::wmma::mem_row_major);
    }
  }
};

// fp32: the same tiles with plain FMA loops, O in shared memory.
template <typename T, int D>
struct WarpTile<T, D, false> {
  using L = Smem<T, D>;
  const T* qs_ = nullptr;
  float* os_ = nullptr;
  int warp_ = 0, lane_ = 0;

  __device__ void bind(const T* qs, float* os, int warp, int lane) {
    qs_ = qs;
    os_ = os;
    warp_ = warp;
    lane_ = lane;
    for (int idx = lane; idx < kWarpRows * D; idx += 32) {
      os_[(warp * kWarpRows + idx / D) * L::kLdO + idx % D] = 0.f;
    }
  }

  __device__ void qk(const T* ks, float* ss, int warp) {
    for (int idx = lane_; idx < kWarpRows * kBK; idx += 32) {
      const int r = idx / kBK, c = idx % kBK;
      const T* qr = qs_ + (warp * kWarpRows + r) * L::kLdX;
      const T* kr = ks + c * L::kLdX;
      float dot = 0.f;
#pragma unroll 8
      for (int k = 0; k < D; ++k) dot += qr[k] * kr[k];
      ss[(warp * kWarpRows + r) * L::kLdS + c] = dot;
    }
  }

  __device__ void rescale(const float* alpha, int lane) {
    // Once the running maxima settle every alpha of the warp is exactly 1: skip the pass.
    if (__all_sync(0xffffffffu, alpha[lane >> 1] == 1.f)) return;
    for (int idx = lane; idx < kWarpRows * D; idx += 32) {
      os_[(warp_ * kWarpRows + idx / D) * L::kLdO + idx % D] *= alpha[idx / D];
    }
    __syncwarp();
  }

  __device__ void pv(const T* ps, const T* vs, int warp) {
    __syncwarp();  // the rescaled O of every lane
    for (int idx = lane_; idx < kWarpRows * D; idx += 32) {
      const int r = idx / D, c = idx % D;
      const T* pr = ps + (warp * kWarpRows + r) * L::kLdP;
      float acc = os_[(warp * kWarpRows + r) * L::kLdO + c];
#pragma unroll 8
      for (int j = 0; j < kBK; ++j) acc += pr[j] * vs[j * L::kLdX + c];
      os_[(warp * kWarpRows + r) * L::kLdO + c] = acc;
    }
  }

  __device__ void finish(float* /*os*/, int /*warp*/) {}  // O is already in os
};

// 16-byte global -> shared copies that bypass registers (sm_80+ cp.async, L2 only: K/V tiles are
// read once per block). A thread's copies of one commit group are complete after
// cp_async_wait<N> leaves at most N newer groups pending; a barrier then publishes them.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gmem_src) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace

template <typename T, typename C, int D>
static __global__ void __launch_bounds__(kThreads, 3) prefill_kernel(const PrefillParams<T, C> p) {
  wait_for_previous_grid();
  using L = Smem<T, D>;
  constexpr int V = kVec16<T>;
  constexpr int kChunks = D / V;  // 16-byte pieces per row

  const int h = blockIdx.x;
  const int tile = gridDim.y - 1 - blockIdx.y;  // last tiles see the most keys: start them first
  const int seq = blockIdx.z;
  const int tok_begin = p.cu_tokens[seq];
  const int n_new = p.cu_tokens[seq + 1] - tok_begin;
  const int q0 = tile * kBQ;
  if (q0 >= n_new) return;
  const int rows = min(kBQ, n_new - q0);
  const int pos0 = p.pos_begin[seq] + q0;  // position of the tile's row 0
  const int kv_len = pos0 + rows;          // keys [0, kv_len) are visible to some row
  const int kvh = h / p.group;
  const int32_t* table = p.block_tables + static_cast<int64_t>(seq) * p.max_blocks;

  extern __shared__ __align__(128) unsigned char smem[];
  T* qs = reinterpret_cast<T*>(smem + L::kQ);
  T* ks = reinterpret_cast<T*>(smem + L::kK);
  T* vs = reinterpret_cast<T*>(smem + L::kV);
  float* ss = reinterpret_cast<float*>(smem + L::kS);
  T* ps = reinterpret_cast<T*>(smem + L::kP);
  float* os = reinterpret_cast<float*>(smem + L::kO);  // tensor cores: staging, valid at the end
  float* row_map = reinterpret_cast<float*>(smem + L::kRowMap);
  float* row_m = reinterpret_cast<float*>(smem + L::kRow);
  float* row_l = row_m + kBQ;
  float* row_alpha = row_l + kBQ;
  // Cache row (units of D elements) of each key of the current tile, -1 past the visible keys.
  int32_t* key_rows = reinterpret_cast<int32_t*>(smem + L::kKeyRows);

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  // Q tile (rows past the sequence's chunk are zeros), O = 0, running max -inf, running sum 0.
  for (int c = tid; c < kBQ * kChunks; c += kThreads) {
    const int r = c / kChunks, piece = c % kChunks;
    Pack<T, V> val{};
    if (r < rows) {
      val = *reinterpret_cast<const Pack<T, V>*>(p.q + (tok_begin + q0 + r) * p.q_stride + h * D +
                                                 piece * V);
    }
    *reinterpret_cast<Pack<T, V>*>(qs + r * L::kLdX + piece * V) = val;
  }
  for (int idx = tid; idx < 16 * 16; idx += kThreads) row_map[idx] = static_cast<float>(idx / 16);
  if (tid < kBQ) {
    row_m[tid] = -INFINITY;
    row_l[tid] = 0.f;
  }

  // Key rows: thread j < kBK owns key j of a tile. Its block-table entry is loaded one tile ahead
  // (the load is issued before the tile's compute and consumed after it), so the K/V gather below
  // never waits on a table load: with the table load in the gather loop every tile paid two
  // serial global round trips per row (measured ~12 us per tile, 45 TFLOP/s).
  auto table_block = [&](int pos) -> int32_t {
    return pos < kv_len ? table[pos / p.block_size] : 0;
  };
  auto key_row = [&](int pos, int32_t block) -> int32_t {
    return pos < kv_len ? (block * p.kv_heads + kvh) * p.block_size + pos % p.block_size : -1;
  };
  if (tid < kBK) key_rows[tid] = key_row(tid, table_block(tid));

  __syncthreads();  // Q tile and row map complete
  WarpTile<T, D> wt;
  if constexpr (kTensorCores<T>) {
    wt.init(qs, row_map, warp);  // the scores overwrite the Q tile only after the next barrier
  } else {
    wt.bind(qs, os, warp, lane);
  }

  constexpr int kGather = kBK * kChunks / kThreads;  // 16-byte pieces of K (and of V) per thread
  static_assert(kBK * kChunks % kThreads == 0, "tile gather must divide evenly");
  const int n_tiles = (kv_len + kBK - 1) / kBK;
  for (int kt = 0; kt < n_tiles; ++kt) {
    const int k0 = kt * kBK;
    __syncthreads();  // the previous tile's K/V are no longer read; key_rows (and Q/O) are set
    // Gather the tile: K as one cp.async group, V as a second one, so V keeps arriving while
    // Q.K^T and the softmax run. Keys past the visible ones are zeros (plain stores): V must not
    // carry NaN garbage into 0 * v.
    if constexpr (std::is_same_v<C, T>) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const T* src = half == 0 ? p.k_cache : p.v_cache;
        T* dst = half == 0 ? ks : vs;
#pragma unroll
        for (int it = 0; it < kGather; ++it) {
          const int c = tid + it * kThreads;
          const int j = c / kChunks, piece = c % kChunks;
          const int row = key_rows[j];
          T* d = dst + j * L::kLdX + piece * V;
          if (row >= 0) {
            cp_async16(d, src + static_cast<int64_t>(row) * D + piece * V);
          } else {
            *reinterpret_cast<Pack<T, V>*>(d) = Pack<T, V>{};
          }
        }
        cp_async_commit();
      }
    } else {
      // fp8 cache: cp.async cannot convert, so the 8-byte pieces go through registers, every
      // load of the tile (K and V) issued before the first conversion. The waits below then
      // find no pending copies.
      Pack<C, V> kr[kGather], vr[kGather];
#pragma unroll
      for (int it = 0; it < kGather; ++it) {
        const int c = tid + it * kThreads;
        const int row = key_rows[c / kChunks];
        const int64_t off = static_cast<int64_t>(row) * D + (c % kChunks) * V;
        kr[it] = row >= 0 ? *reinterpret_cast<const Pack<C, V>*>(p.k_cache + off) : Pack<C, V>{};
        vr[it] = row >= 0 ? *reinterpret_cast<const Pack<C, V>*>(p.v_cache + off) : Pack<C, V>{};
      }
#pragma unroll
      for (int it = 0; it < kGather; ++it) {
        const int c = tid + it * kThreads;
        const int at = (c / kChunks) * L::kLdX + (c % kChunks) * V;
        float x[V];
        unpack_float(kr[it], x);
        store_float<T, V>(ks + at, x);
        unpack_float(vr[it], x);
        store_float<T, V>(vs + at, x);
      }
    }
    // The next tile's block-table entry: requested now, written to key_rows after this tile.
    const int next_pos = k0 + kBK + tid;
    const int32_t next_block = tid < kBK ? table_block(next_pos) : 0;
    cp_async_wait<1>();  // this thread's K copies have landed
    __syncthreads();     // everyone's K; key_rows may be overwritten at the end of this tile

    wt.qk(ks, ss, warp);
    __syncwarp();

    // Online softmax: lanes 2r and 2r + 1 own row r of the warp, 32 columns each.
    {
      const int r = lane >> 1, half = lane & 1;
      const int row = warp * kWarpRows + r;
      const int qpos = row < rows ? pos0 + row : -1;  // -1: padding row, every key masked
      const float* srow = ss + row * L::kLdS + half * 32;
      T* prow = ps + row * L::kLdP + half * 32;
      const int kbase = k0 + half * 32;
      float mx = -INFINITY;
#pragma unroll 8
      for (int c = 0; c < 32; ++c) {
        if (kbase + c <= qpos) mx = fmaxf(mx, srow[c] * p.scale);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_old = row_m[row];
      const float m_new = fmaxf(m_old, mx);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // no key seen yet: avoid inf - inf
      float sum = 0.f;
#pragma unroll 8
      for (int c = 0; c < 32; ++c) {
        const T pv = from_float<T>(kbase + c <= qpos ? expf(srow[c] * p.scale - m_use) : 0.f);
        prow[c] = pv;
        sum += to_float(pv);  // normalise by the weights actually multiplied with V
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      const float alpha = expf(m_old - m_use);  // 0 when m_old = -inf
      __syncwarp();  // both lanes of the row have read row_m before it changes
      if (half == 0) {
        row_m[row] = m_new;
        row_l[row] = row_l[row] * alpha + sum;
        row_alpha[row] = alpha;
      }
    }
    __syncwarp();
    wt.rescale(row_alpha + warp * kWarpRows, lane);  // O *= exp(m_old - m_new) per row
    cp_async_wait<0>();                              // this thread's V copies have landed
    __syncthreads();                                 // everyone's V
    wt.pv(ps, vs, warp);
    if (tid < kBK) key_rows[tid] = key_row(next_pos, next_block);
  }
  if constexpr (kTensorCores<T>) __syncthreads();  // every warp is done with K/V: stage O there
  wt.finish(os, warp);
  __syncwarp();  // the warp's O rows are visible to every lane

  T* out = p.out + (static_cast<int64_t>(tok_begin) + q0) * p.heads * D + h * D;
  for (int idx = lane; idx < kWarpRows * D; idx += 32) {
    const int row = warp * kWarpRows + idx / D, c = idx % D;
    if (row < rows) {
      out[static_cast<int64_t>(row) * p.heads * D + c] =
          from_float<T>(os[row * L::kLdO + c] / row_l[row]);
    }
  }
}

template <typename T, typename C, int D>
static cudaError_t run_prefill(const PrefillParams<T, C>& p, const PrefillAttentionArgs<T, C>& a,
                               cudaStream_t stream) {
  constexpr size_t bytes = Smem<T, D>::kBytes;
  cudaError_t err =
      cudaFuncSetAttribute(prefill_kernel<T, C, D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(bytes));
  if (err != cudaSuccess) return err;
  const dim3 grid(a.heads, static_cast<unsigned>(ceil_div(a.max_new_tokens, kBQ)), a.num_seqs);
  launch_kernel(prefill_kernel<T, C, D>, grid, kThreads, bytes, stream, p);
  return cudaGetLastError();
}

template <typename T, typename C>
cudaError_t launch_attention_prefill(const PrefillAttentionArgs<T, C>& a, cudaStream_t stream) {
  const auto& c = a.cache;
  const int d = c.head_dim;
  LLAMA2_LAUNCH_REQUIRE(a.num_seqs >= 0 && a.num_seqs <= 65535,
                        "num_seqs " + std::to_string(a.num_seqs) + ", allowed 0..65535");
  LLAMA2_LAUNCH_REQUIRE(
      a.heads > 0 && c.kv_heads > 0 && a.heads % c.kv_heads == 0,
      "heads " + std::to_string(a.heads) + ", kv_heads " + std::to_string(c.kv_heads));
  LLAMA2_LAUNCH_REQUIRE(c.block_size > 0 && c.num_blocks > 0 && a.max_blocks > 0,
                        "block_size " + std::to_string(c.block_size) + ", num_blocks " +
                            std::to_string(c.num_blocks) + ", max_blocks " +
                            std::to_string(a.max_blocks));
  LLAMA2_LAUNCH_REQUIRE(a.max_new_tokens >= 0 && ceil_div(a.max_new_tokens, kBQ) <= 65535,
                        "max_new_tokens " + std::to_string(a.max_new_tokens));
  LLAMA2_LAUNCH_REQUIRE(
      a.q_stride >= static_cast<int64_t>(a.heads) * d && a.q_stride % kVec16<T> == 0,
      "q_stride " + std::to_string(a.q_stride));
  // Cache rows are indexed in int32 (units of head_dim elements).
  LLAMA2_LAUNCH_REQUIRE(static_cast<int64_t>(c.num_blocks) * c.kv_heads * c.block_size <= INT32_MAX,
                        std::to_string(c.num_blocks) + " blocks");
  LLAMA2_LAUNCH_REQUIRE(
      a.mma_query_tile == 0 || a.mma_query_tile == 64 || a.mma_query_tile == 128,
      "mma_query_tile " + std::to_string(a.mma_query_tile) + ", allowed 0, 64, 128");
  LLAMA2_LAUNCH_REQUIRE(a.mma_kv_splits >= 0 && a.mma_kv_splits <= kPrefillMaxKvSplits,
                        "mma_kv_splits " + std::to_string(a.mma_kv_splits) + ", allowed 0.." +
                            std::to_string(kPrefillMaxKvSplits));
  if (a.num_seqs == 0 || a.max_new_tokens == 0) return cudaSuccess;
  LLAMA2_LAUNCH_REQUIRE(d == 64 || d == 128,
                        "head_dim " + std::to_string(d) + " is not instantiated (64, 128)");
  LLAMA2_LAUNCH_REQUIRE(a.q != nullptr && c.k != nullptr && c.v != nullptr && a.out != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(
      a.block_tables != nullptr && a.cu_tokens != nullptr && a.pos_begin != nullptr, "");
  LLAMA2_LAUNCH_REQUIRE(is_aligned(a.q, 16) && is_aligned(c.k, 16) && is_aligned(c.v, 16),
                        "16-byte alignment");
  if constexpr (kTensorCores<T>) {
    if (a.kernel != PrefillKernel::kWmma) return launch_attention_prefill_mma(a, stream);
  }
  PrefillParams<T, C> p{};
  p.q = a.q;
  p.q_stride = a.q_stride;
  p.k_cache = c.k;
  p.v_cache = c.v;
  p.kv_heads = c.kv_heads;
  p.block_size = c.block_size;
  p.block_tables = a.block_tables;
  p.max_blocks = a.max_blocks;
  p.cu_tokens = a.cu_tokens;
  p.pos_begin = a.pos_begin;
  p.heads = a.heads;
  p.group = a.heads / c.kv_heads;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));  // as llama2::cpu::paged_attention
  p.out = a.out;
  switch (d) {
    case 64:
      return run_prefill<T, C, 64>(p, a, stream);
    case 128:
      return run_prefill<T, C, 128>(p, a, stream);
    default:
      return cudaErrorInvalidValue;  // refused above
  }
}

#define LLAMA2_INSTANTIATE(T, C)                                                         \
  template cudaError_t launch_attention_prefill<T, C>(const PrefillAttentionArgs<T, C>&, \
                                                      cudaStream_t);
LLAMA2_FOR_EACH_KV_TYPES(LLAMA2_INSTANTIATE)
#undef LLAMA2_INSTANTIATE

}  // namespace llama2::kernels
