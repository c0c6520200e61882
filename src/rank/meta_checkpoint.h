// Meta's consolidated.NN.pth files (common/meta_params.h has the folder's params.json) as the
// Hugging Face tensors the loaders ask for.
//
// Meta's checkpoint for model-parallel degree MP is MP files, file k holding part k of every
// tensor under Meta's names, as its model.py splits them (fairscale's layers):
//   tok_embeddings.weight [V, H/MP]  hidden columns (ParallelEmbedding)  -> model.embed_tokens
//   output.weight         [V/MP, H]  vocabulary rows (ColumnParallel)    -> lm_head
//   layers.L.attention.wq/wk/wv      output rows, whole heads            -> q/k/v_proj
//   layers.L.attention.wo            input columns (RowParallel)         -> o_proj
//   layers.L.feed_forward.w1/w3/w2   rows / rows / columns               -> gate/up/down_proj
//   norm, layers.L.attention_norm, layers.L.ffn_norm: whole in every file (one file is read);
//   rope.freqs (RoPE's inverse frequencies, recomputed from rope_theta) is not read.
// The engine splits tensors as Hugging Face's layout does (common/shard_plan.h), so every tensor
// becomes pieces concatenated along Meta's axis (rank/weight_store.h) and each rank's block read
// touches only the files that hold its part: when the TP degree equals or divides MP, its own
// files (rank r of T: files [r MP/T, (r+1) MP/T)), except the embedding, whose vocabulary rows
// every file holds a column slice of; at other degrees a rank reads a slice of a shared file.
//
// RoPE: Meta rotates the pairs (2i, 2i+1) of each head (complex multiplication over interleaved
// pairs), Hugging Face the pairs (i, i + d/2) (rotate_half). HF's conversion script therefore
// permutes the rows of wq and wk within each head; here the same permutation is applied as the
// rows are read (StoredTensor::rope_head_dim), so q and k arrive in HF's order and every backend's
// RoPE kernel stays as it is. Attention scores are dot products of q and k, which the common
// permutation leaves unchanged; v and wo are not permuted.
#pragma once

#include <string>

#include "common/model_config.h"
#include "common/shard_plan.h"
#include "rank/weight_store.h"

namespace llama2 {

// The weights of `c`'s model directory for the rank of `shard`: WeightStore::open for a Hugging
// Face layout, Meta's consolidated files for CheckpointLayout::kMeta (replicated tensors are read
// from the file holding the rank's first query head).
WeightStore open_checkpoint(const std::string& model_dir, const ModelConfig& c,
                            const ShardPlan& shard);

// Meta's folder alone. Error naming the file and tensor (with its Hugging Face name) when a file
// is missing, numbered out of sequence, lacks a tensor, or holds pieces that do not fit together.
WeightStore open_meta_checkpoint(const std::string& model_dir, const ModelConfig& c,
                                 const ShardPlan& shard);

}  // namespace llama2
