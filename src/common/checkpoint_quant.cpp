#include "common/checkpoint_quant.h"

#include <nlohmann/json.hpp>

#include "common/check.h"

namespace llama2 {
namespace {

using nlohmann::json;

// Refuses `value` of field `where` (a path inside quantization_config) with the allowed values.
[[noreturn]] void refuse(const std::string& source, const std::string& where, const json& value,
                         const std::string& allowed) {
  throw Error(source + ": quantization_config" + (where.empty() ? "" : "." + where) + " " +
              value.dump() + " is not supported (allowed: " + allowed + ")");
}

// obj[key] when present and not null, else nullptr.
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

void expect_value(const json& obj, const char* key, const json& want, const std::string& source,
                  const std::string& where, const std::string& allowed) {
  const json* v = field(obj, key);
  if (v != nullptr && *v != want) refuse(source, where + key, *v, allowed);
}

// quant_method "fp8": one scale per tensor (or per channel), e4m3 values.
CheckpointQuant parse_fp8(const json& q, const std::string& source) {
  CheckpointQuant out;
  out.fp8 = true;
  out.method = "fp8";
  if (const json* b = field(q, "weight_block_size")) {
    refuse(source, "weight_block_size", *b,
           "null: block-wise scales are not read; per-tensor or per-channel weight_scale");
  }
  if (const json* f = field(q, "fmt"); f != nullptr && *f != "e4m3") {
    refuse(source, "fmt", *f, "\"e4m3\"");
  }
  if (const json* a = field(q, "activation_scheme")) {
    if (*a == "static") {
      out.static_activations = true;
    } else if (*a != "dynamic") {
      refuse(source, "activation_scheme", *a, "\"dynamic\", \"static\"");
    }
  }
  return out;
}

// One config group of compressed-tensors: FP8 weights per tensor or channel, FP8 or no
// activation quantization.
void check_group(const std::string& name, const json& g, const std::string& source,
                 CheckpointQuant* out) {
  const std::string at = "config_groups." + name + ".";
  if (!g.is_object()) refuse(source, at.substr(0, at.size() - 1), g, "an object");
  const json* w = field(g, "weights");
  if (w == nullptr || !w->is_object()) {
    refuse(source, at + "weights", w ? *w : json(), "an object describing 8-bit float weights");
  }
  const std::string wat = at + "weights.";
  expect_value(*w, "num_bits", 8, source, wat, "8");
  expect_value(*w, "type", "float", source, wat, "\"float\" (fp8 e4m3)");
  expect_value(*w, "symmetric", true, source, wat, "true");
  expect_value(*w, "dynamic", false, source, wat, "false");
  if (const json* s = field(*w, "strategy"); s == nullptr || (*s != "tensor" && *s != "channel")) {
    refuse(source, wat + "strategy", s ? *s : json(), "\"tensor\", \"channel\"");
  }
  for (const char* key : {"group_size", "block_structure"}) {
    if (const json* v = field(*w, key)) {
      refuse(source, wat + key, *v, "null: only per-tensor or per-channel scales are read");
    }
  }
  if (const json* o = field(g, "output_activations"))
    refuse(source, at + "output_activations", *o, "null");
  if (const json* a = field(g, "input_activations")) {
    const std::string aat = at + "input_activations.";
    if (!a->is_object()) refuse(source, aat.substr(0, aat.size() - 1), *a, "null or an object");
    expect_value(*a, "num_bits", 8, source, aat, "8");
    expect_value(*a, "type", "float", source, aat, "\"float\"");
    const json* s = field(*a, "strategy");
    if (s == nullptr || (*s != "token" && *s != "tensor")) {
      refuse(source, aat + "strategy", s ? *s : json(), "\"token\", \"tensor\"");
    }
    const json* d = field(*a, "dynamic");
    if (d != nullptr && !d->is_boolean()) refuse(source, aat + "dynamic", *d, "true, false");
    if (d == nullptr || !d->get<bool>()) {
      if (*s == "token") refuse(source, aat + "dynamic", d ? *d : json(), "true with \"token\"");
      out->static_activations = true;
    }
  }
}

CheckpointQuant parse_compressed_tensors(const json& q, const std::string& source) {
  CheckpointQuant out;
  out.fp8 = true;
  out.method = "compressed-tensors";
  const json* fmt = field(q, "format");
  if (fmt == nullptr || *fmt != "float-quantized") {
    refuse(source, "format", fmt ? *fmt : json(), "\"float-quantized\" (fp8 weights)");
  }
  if (const json* st = field(q, "quantization_status"); st != nullptr && *st != "compressed") {
    refuse(source, "quantization_status", *st, "\"compressed\"");
  }
  if (const json* kv = field(q, "kv_cache_scheme")) {
    refuse(source, "kv_cache_scheme", *kv,
           "null; for an fp8 KV cache use --kv-cache-dtype fp8, which needs no stored scales");
  }
  const json* groups = field(q, "config_groups");
  if (groups == nullptr || !groups->is_object() || groups->empty()) {
    refuse(source, "config_groups", groups ? *groups : json(), "a non-empty object of groups");
  }
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    check_group(it.key(), it.value(), source, &out);
  }
  return out;
}

}  // namespace

std::string CheckpointQuant::describe() const {
  if (!fp8) return "";
  return "fp8 e4m3 (" + method + (static_activations ? ", static activation scales" : "") + ")";
}

CheckpointQuant parse_checkpoint_quant(const json& config, const std::string& source) {
  const json* q = field(config, "quantization_config");
  if (q == nullptr) return {};
  if (!q->is_object()) refuse(source, "", *q, "an object");
  const json* method = field(*q, "quant_method");
  if (method != nullptr && *method == "fp8") return parse_fp8(*q, source);
  if (method != nullptr && *method == "compressed-tensors") {
    return parse_compressed_tensors(*q, source);
  }
  if (method != nullptr && *method == "fbgemm_fp8") {
    // fbgemm's layout: per-row weight_scale [out, 1], activations per token at run time
    // (activation_scale_ub, fbgemm's clamp of a token's max, is not applied: per-token scales
    // without the clamp lose nothing on ordinary activations).
    CheckpointQuant out;
    out.fp8 = true;
    out.method = "fbgemm_fp8";
    return out;
  }
  refuse(
      source, "quant_method", method ? *method : json(),
      "\"fp8\", \"compressed-tensors\" with fp8 weights, \"fbgemm_fp8\"; other checkpoints must be "
      "fp32/fp16/bf16");
}

}  // namespace llama2
