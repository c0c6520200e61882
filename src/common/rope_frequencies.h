// RoPE's inverse frequencies as Hugging Face's LlamaRotaryEmbedding computes them, rope_scaling
// included (common/model_config.h): the one definition every backend rotates with, so that the
// CPU reference and the CUDA tables agree bit for bit.
//
// Dynamic NTK makes the frequencies a function of the sequence's length. transformers recomputes
// them in each forward call from seq_len = max(position_ids) + 1 of that call; for one sequence
// that is the sequence's length after the call's tokens. The engine applies exactly that per
// sequence of a step: its tokens rotate with the frequencies of length pos_begin + n_tokens, so a
// prompt prefilled at once uses its full length, each decoded token its own position + 1, and a
// chunked prefill each chunk's end. Keys already in the KV cache keep the frequencies they were
// rotated with, as in transformers' cache. (transformers also keeps the largest length seen in
// the module across calls and batches; the engine does not carry one request's length into
// another's.)
#pragma once

#include <vector>

#include "common/model_config.h"

namespace llama2 {

// inv_freq[i], i < head_dim / 2, for a sequence whose length after this step is `seq_len`:
// 1 / base^(2i / d) in fp32 as transformers builds it, divided by the factor (linear), or with
// dynamic NTK's base when seq_len > original_max_position_embeddings. `seq_len` 0: the frequencies
// of the original length (all of them when nothing depends on the length).
std::vector<float> rope_inv_freq(const ModelConfig& c, int seq_len = 0);

// Whether KV blocks computed by one sequence may serve another (prefix caching): not under dynamic
// NTK, where a block's keys were rotated with frequencies of the length its first sequence had
// then, which another sequence of another length would not have used (and transformers, the
// reference, has no such cache).
bool rope_allows_prefix_caching(const ModelConfig& c);

// Whether a sequence of `seq_len` tokens rotates with other frequencies than rope_inv_freq(c):
// dynamic NTK past the original length.
bool rope_rescaled(const ModelConfig& c, int seq_len);

}  // namespace llama2
