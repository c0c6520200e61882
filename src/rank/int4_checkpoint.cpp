#include "rank/int4_checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/check.h"
#include "common/shard_plan.h"
#include "rank/weight_store.h"

namespace llama2 {
namespace {

// AWQ's nibble of output column 8j + p is kAwqNibble[p] (it packs columns 0, 2, 4, 6, 1, 3, 5, 7).
constexpr int kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

int nibble(int32_t word, int k) {
  return static_cast<int>((static_cast<uint32_t>(word) >> (4 * k)) & 0xfu);
}

// The tensors of one projection module and its dimensions.
struct Module {
  std::string qweight, qzeros, scales, g_idx;
  int64_t out = 0, in = 0, group = 0, groups = 0;
};

Module module_of(const ModelConfig& c, const TensorSlice& s) {
  const std::string suffix = ".weight";
  LLAMA2_CHECK(s.name.size() > suffix.size() && s.full_shape.size() == 2);
  const std::string m = s.name.substr(0, s.name.size() - suffix.size());
  Module mod{m + ".qweight", m + ".qzeros", m + ".scales", m + ".g_idx"};
  mod.out = s.full_shape[0];
  mod.in = s.full_shape[1];
  mod.group = c.quant.group_size > 0 ? c.quant.group_size : mod.in;
  mod.groups = (mod.in + mod.group - 1) / mod.group;
  return mod;
}

std::string where(const TensorInfo& t) {
  return t.file->path() + ": tensor '" + t.name + "'";
}

void expect(const WeightStore& w, const std::string& name, std::vector<int64_t> shape,
            bool packed_ints, const std::string& why) {
  const TensorInfo& t = w.get(name);
  if (packed_ints ? t.dtype != DType::I32
                  : (t.dtype != DType::F16 && t.dtype != DType::BF16 && t.dtype != DType::F32)) {
    throw Error(where(t) + " has dtype " + t.dtype_name + "; expected " +
                (packed_ints ? "I32 (8 packed 4-bit values)" : "F16, BF16 or F32"));
  }
  if (t.shape != shape) {
    throw Error(where(t) + " has shape " + shape_to_string(t.shape) + ", expected " +
                shape_to_string(shape) + " (" + why + ")");
  }
}

// GPTQ's g_idx: present with desc_act; without it, absent or row / G.
void check_g_idx(const WeightStore& w, const ModelConfig& c, const Module& m) {
  if (!w.has(m.g_idx)) {
    if (c.quant.desc_act) throw Error("tensor '" + m.g_idx + "' is missing, and desc_act is true");
    return;
  }
  expect(w, m.g_idx, {m.in}, true, "one group index per input row");
  std::vector<int32_t> g(static_cast<size_t>(m.in));
  w.read_block_raw(m.g_idx, 0, 1, 0, m.in, g.data());
  for (int64_t i = 0; i < m.in; ++i) {
    const bool ok = c.quant.desc_act ? g[i] >= 0 && g[i] < m.groups : g[i] == i / m.group;
    if (!ok) {
      throw Error(where(w.get(m.g_idx)) + " row " + std::to_string(i) + " names group " +
                  std::to_string(g[i]) +
                  (c.quant.desc_act
                       ? "; there are " + std::to_string(m.groups)
                       : " but desc_act is false, so it must be row / " + std::to_string(m.group)));
    }
  }
}

// Column k of `rows` packed zero points for output column o (o0: the block's first column).
int zero_of(const ModelConfig& c, const int32_t* zrow, int64_t o, int64_t o0) {
  const int32_t word = zrow[(o - o0) / 8];
  if (c.quant.int4 == Int4Format::kAwq) return nibble(word, kAwqNibble[o % 8]);
  // GPTQ v1 stores zero - 1 (AutoGPTQ's kernels add the 1 back, unmasked).
  return nibble(word, static_cast<int>(o % 8)) + (c.quant.gptq_v2 ? 0 : 1);
}

}  // namespace

bool is_int4_slice(const ModelConfig& c, const TensorSlice& s) {
  const std::string suffix = "_proj.weight";
  return c.quant.int4 != Int4Format::kNone && s.name.size() > suffix.size() &&
         s.name.compare(s.name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void validate_int4_checkpoint(const WeightStore& w, const ModelConfig& c) {
  const ShardPlan whole = make_shard_plan(c, 1, 0);
  const bool awq = c.quant.int4 == Int4Format::kAwq;
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < static_cast<int>(LayerTensor::kCount); ++i) {
      const TensorSlice s = layer_slice(c, whole, l, static_cast<LayerTensor>(i));
      if (!is_int4_slice(c, s)) continue;
      const Module m = module_of(c, s);
      const std::string dims = "[out " + std::to_string(m.out) + ", in " + std::to_string(m.in) +
                               "], " + std::to_string(m.groups) + " groups of " +
                               std::to_string(m.group);
      if (m.out % 8 != 0 || m.in % m.group != 0 || (!awq && m.in % 8 != 0)) {
        throw Error(s.name + " " + dims + ": the packing needs out and in multiples of 8 and " +
                    "in a multiple of the group size");
      }
      if (w.has(s.name)) {
        throw Error(where(w.get(s.name)) + " is unquantized, but " + c.quant.describe() +
                    " needs every projection packed (qweight, qzeros, scales)");
      }
      expect(w, m.qweight,
             awq ? std::vector<int64_t>{m.in, m.out / 8} : std::vector<int64_t>{m.in / 8, m.out},
             true, std::string(awq ? "AWQ" : "GPTQ") + " packing of " + dims);
      expect(w, m.qzeros, {m.groups, m.out / 8}, true, "zero points of " + dims);
      expect(w, m.scales, {m.groups, m.out}, false, "scales of " + dims);
      if (!awq) check_g_idx(w, c, m);
    }
  }
}

namespace {

// Calls emit(o - o0, i - i0, q, zero, scale, group - g0) for every weight of the slice, after
// reading its packed words, zero points and scales (the whole decoding of both formats).
template <typename Emit>
void decode_slice(const WeightStore& w, const ModelConfig& c, const TensorSlice& s, Emit&& emit) {
  const Module m = module_of(c, s);
  const int64_t o0 = s.row_begin, o1 = s.row_end, i0 = s.col_begin, i1 = s.col_end;
  const int64_t no = o1 - o0, ni = i1 - i0;
  if (o0 % 8 != 0 || o1 % 8 != 0) {
    throw Error(s.name + ": output columns [" + std::to_string(o0) + ", " + std::to_string(o1) +
                ") would cut a packed int32 word");
  }
  const bool awq = c.quant.int4 == Int4Format::kAwq;
  // Each input row's group: row / G, or (GPTQ with g_idx) the rows' own entries.
  std::vector<int32_t> group(static_cast<size_t>(ni));
  if (!awq && w.has(m.g_idx)) {
    w.read_block_raw(m.g_idx, 0, 1, i0, i1, group.data());
  } else {
    for (int64_t i = 0; i < ni; ++i) group[i] = static_cast<int32_t>((i0 + i) / m.group);
  }
  const auto [gmin_it, gmax_it] = std::minmax_element(group.begin(), group.end());
  const int64_t g0 = *gmin_it, g1 = *gmax_it + 1;
  std::vector<float> scale(static_cast<size_t>((g1 - g0) * no));  // [groups, no]
  w.read_block_f32(m.scales, g0, g1, o0, o1, scale.data());
  std::vector<int32_t> zeros(static_cast<size_t>((g1 - g0) * no / 8));  // [groups, no / 8]
  w.read_block_raw(m.qzeros, g0, g1, o0 / 8, o1 / 8, zeros.data());
  // AWQ: rows i0..i1 of [in, out/8]; GPTQ: packed rows i0/8 .. ceil(i1/8) of [in/8, out].
  const int64_t r0 = awq ? i0 : i0 / 8, r1 = awq ? i1 : (i1 + 7) / 8;
  const int64_t width = awq ? no / 8 : no;
  std::vector<int32_t> q(static_cast<size_t>((r1 - r0) * width));
  w.read_block_raw(m.qweight, r0, r1, awq ? o0 / 8 : o0, awq ? o1 / 8 : o1, q.data());
  for (int64_t i = 0; i < ni; ++i) {
    const int64_t g = group[i] - g0, row = i0 + i;
    const int32_t* zrow = zeros.data() + g * (no / 8);
    const float* srow = scale.data() + g * no;
    for (int64_t o = o0; o < o1; ++o) {
      const int v = awq ? nibble(q[i * width + (o - o0) / 8], kAwqNibble[o % 8])
                        : nibble(q[(row / 8 - r0) * width + (o - o0)], static_cast<int>(row % 8));
      emit(o - o0, i, v, zero_of(c, zrow, o, o0), srow[o - o0], g);
    }
  }
}

}  // namespace

void read_int4_slice_f32(const WeightStore& w, const ModelConfig& c, const TensorSlice& s,
                         float* out) {
  const int64_t ni = s.col_end - s.col_begin;
  decode_slice(w, c, s, [&](int64_t o, int64_t i, int q, int zero, float scale, int64_t) {
    out[o * ni + i] = static_cast<float>(q - zero) * scale;
  });
}

int64_t int4_slice_groups(const ModelConfig& c, const TensorSlice& s) {
  const int64_t G = module_of(c, s).group;
  return (s.col_end - s.col_begin + G - 1) / G;
}

void read_int4_slice_w4(const WeightStore& w, const ModelConfig& c, const TensorSlice& s,
                        uint32_t* q, float* scale, int32_t* zero) {
  const int64_t no = s.row_end - s.row_begin, ni = s.col_end - s.col_begin;
  const int64_t G = module_of(c, s).group;
  if (!c.quant.int4_contiguous_groups() || s.col_begin % G != 0 || ni % 8 != 0) {
    throw Error(s.name + ": input columns [" + std::to_string(s.col_begin) + ", " +
                std::to_string(s.col_end) + ") are not whole contiguous groups of " +
                std::to_string(G) + " in whole words of 8 (the 4-bit kernels' layout)");
  }
  std::fill(q, q + no * ni / 8, 0u);
  decode_slice(w, c, s, [&](int64_t o, int64_t i, int v, int z, float sc, int64_t g) {
    // Element i % 8 of word i / 8 in nibble (i % 8 even: (i % 8) / 2, odd: 4 + (i % 8) / 2), as
    // kernels/w4_convert.cuh lays words out.
    const int e = static_cast<int>(i % 8);
    q[o * (ni / 8) + i / 8] |= static_cast<uint32_t>(v) << (4 * ((e & 1) * 4 + (e >> 1)));
    scale[g * no + o] = sc;
    zero[g * no + o] = z;
  });
}

}  // namespace llama2
