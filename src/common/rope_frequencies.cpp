#include "common/rope_frequencies.h"

#include <cmath>

namespace llama2 {

bool rope_allows_prefix_caching(const ModelConfig& c) {
  return c.rope_scaling.type != RopeScalingType::kDynamic;
}

bool rope_rescaled(const ModelConfig& c, int seq_len) {
  return c.rope_scaling.type == RopeScalingType::kDynamic &&
         seq_len > c.rope_scaling.original_max_position_embeddings;
}

std::vector<float> rope_inv_freq(const ModelConfig& c, int seq_len) {
  const int d = c.head_dim();
  float base = static_cast<float>(c.rope_theta);
  if (rope_rescaled(c, seq_len)) {
    // transformers computes the new base on tensors (seq_len is one), so in fp32, op by op:
    // theta * ((factor * len / original) - (factor - 1)) ** (d / (d - 2)).
    const auto factor = static_cast<float>(c.rope_scaling.factor);
    const float ratio = factor * static_cast<float>(seq_len) /
                            static_cast<float>(c.rope_scaling.original_max_position_embeddings) -
                        static_cast<float>(c.rope_scaling.factor - 1.0);
    base = static_cast<float>(c.rope_theta) *
           std::pow(ratio, static_cast<float>(static_cast<double>(d) / (d - 2)));
  }
  std::vector<float> inv(static_cast<size_t>(d / 2));
  for (int i = 0; i < d / 2; ++i) {
    // 1.0 / (base ** (arange(0, d, 2).float() / d)), fp32.
    inv[i] = 1.0f / std::pow(base, static_cast<float>(2 * i) / static_cast<float>(d));
    if (c.rope_scaling.type == RopeScalingType::kLinear) {
      inv[i] /= static_cast<float>(c.rope_scaling.factor);
    }
  }
  return inv;
}

}  // namespace llama2
