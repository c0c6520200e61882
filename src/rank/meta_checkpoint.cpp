#include "rank/meta_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <regex>

#include "common/check.h"
#include "rank/torch_file.h"
#include "rank/weight_layout.h"

namespace llama2 {
namespace {

namespace fs = std::filesystem;

// How a tensor is cut across Meta's files.
enum class MetaSplit { kWhole, kRows, kRowsRope, kCols };

struct MetaTensor {
  std::string name;  // Meta's name
  MetaSplit split;
};

MetaTensor meta_layer_tensor(int layer, LayerTensor t) {
  const std::string p = "layers." + std::to_string(layer) + ".";
  switch (t) {
    case LayerTensor::kAttnNorm:
      return {p + "attention_norm.weight", MetaSplit::kWhole};
    case LayerTensor::kWq:
      return {p + "attention.wq.weight", MetaSplit::kRowsRope};
    case LayerTensor::kWk:
      return {p + "attention.wk.weight", MetaSplit::kRowsRope};
    case LayerTensor::kWv:
      return {p + "attention.wv.weight", MetaSplit::kRows};
    case LayerTensor::kWo:
      return {p + "attention.wo.weight", MetaSplit::kCols};
    case LayerTensor::kMlpNorm:
      return {p + "ffn_norm.weight", MetaSplit::kWhole};
    case LayerTensor::kWgate:
      return {p + "feed_forward.w1.weight", MetaSplit::kRows};
    case LayerTensor::kWup:
      return {p + "feed_forward.w3.weight", MetaSplit::kRows};
    case LayerTensor::kWdown:
      return {p + "feed_forward.w2.weight", MetaSplit::kCols};
    case LayerTensor::kCount:
      break;
  }
  LLAMA2_CHECK(false && "unknown layer tensor");
  return {};
}

// Hugging Face name -> Meta's name and split, for every tensor the engine reads.
std::map<std::string, MetaTensor> meta_names(const ModelConfig& c) {
  const ShardPlan whole = make_shard_plan(c, 1, 0);
  std::map<std::string, MetaTensor> out;
  out[embedding_slice(c, whole).name] = {"tok_embeddings.weight", MetaSplit::kCols};
  out[final_norm_slice(c).name] = {"norm.weight", MetaSplit::kWhole};
  out["lm_head.weight"] = {"output.weight", MetaSplit::kRows};
  for (int l = 0; l < c.num_layers; ++l) {
    for (int i = 0; i < static_cast<int>(LayerTensor::kCount); ++i) {
      const auto t = static_cast<LayerTensor>(i);
      out[layer_slice(c, whole, l, t).name] = meta_layer_tensor(l, t);
    }
  }
  return out;
}

// consolidated.00.pth ... consolidated.{MP-1}.pth, checked to be numbered 0..MP-1.
std::vector<std::string> consolidated_files(const std::string& dir) {
  static const std::regex pattern(R"(consolidated\.(\d+)\.pth)");
  std::vector<std::pair<int, std::string>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = e.path().filename().string();
    if (std::regex_match(name, m, pattern)) found.emplace_back(std::stoi(m[1].str()), name);
  }
  if (ec) throw Error(dir + ": cannot list the directory: " + ec.message());
  if (found.empty()) {
    throw Error(dir + ": params.json (Meta's folder format) but no consolidated.NN.pth file");
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (size_t k = 0; k < found.size(); ++k) {
    const std::string want =
        std::string("consolidated.") + (k < 10 ? "0" : "") + std::to_string(k) + ".pth";
    if (found[k].first != static_cast<int>(k)) {
      throw Error(dir +
                  ": Meta's shards are numbered from consolidated.00.pth without gaps; found " +
                  found[k].second + " where " + want + " should be");
    }
    out.push_back(found[k].second);
  }
  return out;
}

const TensorInfo& find_in(const TensorFile& f, const std::string& meta, const std::string& hf) {
  const TensorInfo* t = f.find(meta);
  if (t == nullptr) {
    throw Error(f.path() + ": no tensor '" + meta + "' (Meta's name for " + hf +
                "), which every consolidated.NN.pth of this model holds");
  }
  return *t;
}

}  // namespace

WeightStore open_meta_checkpoint(const std::string& dir, const ModelConfig& c,
                                 const ShardPlan& shard) {
  const std::vector<std::string> names = consolidated_files(dir);
  const int mp = static_cast<int>(names.size());
  if (c.num_heads % mp != 0 || c.num_kv_heads % mp != 0) {
    throw Error(dir + ": " + std::to_string(mp) + " consolidated files, but Meta's model " +
                "parallelism needs the " + std::to_string(c.num_heads) + " heads and " +
                std::to_string(c.num_kv_heads) + " KV heads of params.json to divide by it");
  }
  std::vector<std::unique_ptr<TensorFile>> files;
  for (const std::string& n : names) files.push_back(std::make_unique<TorchFile>(dir + "/" + n));
  // The file holding this rank's first query head serves the tensors every file repeats.
  const int own = shard.head_begin / (c.num_heads / mp);
  std::map<std::string, StoredTensor> tensors;
  for (const auto& [hf, meta] : meta_names(c)) {
    if (hf == "lm_head.weight" && c.tie_word_embeddings) continue;
    StoredTensor& st = tensors[hf];
    if (meta.split == MetaSplit::kWhole) {
      const TensorInfo& mine = find_in(*files[own], meta.name, hf);
      for (const auto& f : files) {
        const TensorInfo& t = find_in(*f, meta.name, hf);
        if (t.shape != mine.shape) {
          throw Error(f->path() + ": tensor '" + meta.name + "' has shape " +
                      shape_to_string(t.shape) + " but " + mine.file->path() + " has " +
                      shape_to_string(mine.shape) + " (every file holds it whole)");
        }
      }
      st.pieces = {&mine};
      continue;
    }
    for (const auto& f : files) st.pieces.push_back(&find_in(*f, meta.name, hf));
    st.axis = meta.split == MetaSplit::kCols ? 1 : 0;
    if (meta.split == MetaSplit::kRowsRope) st.rope_head_dim = c.head_dim();
  }
  return WeightStore::from_pieces(dir, names, std::move(files), std::move(tensors));
}

WeightStore open_checkpoint(const std::string& model_dir, const ModelConfig& c,
                            const ShardPlan& shard) {
  if (c.layout == CheckpointLayout::kMeta) return open_meta_checkpoint(model_dir, c, shard);
  return WeightStore::open(model_dir);
}

}  // namespace llama2
