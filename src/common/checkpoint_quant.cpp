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

int int_field(const json& q, const char* key, const std::string& source, int fallback) {
  const json* v = field(q, key);
  if (v == nullptr) return fallback;
  if (!v->is_number_integer()) refuse(source, key, *v, "an integer");
  return v->get<int>();
}

bool bool_field(const json& q, const char* key, const std::string& source, bool fallback) {
  const json* v = field(q, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) refuse(source, key, *v, "true, false");
  return v->get<bool>();
}

// What AWQ and GPTQ share: 4 bits, a group size, no unquantized projections.
void parse_int4_common(const json& q, const std::string& source, CheckpointQuant* out) {
  if (const int bits = int_field(q, "bits", source, 4); bits != 4) {
    refuse(source, "bits", bits, "4 (other widths are not read)");
  }
  if (const json* w = field(q, "w_bit"); w != nullptr && *w != 4) refuse(source, "w_bit", *w, "4");
  out->group_size = int_field(q, "group_size", source, int_field(q, "q_group_size", source, 128));
  if (out->group_size == 0 || out->group_size < -1 ||
      (out->group_size > 0 && out->group_size % 8 != 0)) {
    refuse(source, "group_size", out->group_size, "a positive multiple of 8, or -1");
  }
  if (const json* m = field(q, "modules_to_not_convert")) {
    for (const json& name : *m) {
      if (name != "lm_head") {
        refuse(source, "modules_to_not_convert", *m,
               "null, [] or [\"lm_head\"]: every projection must be 4-bit");
      }
    }
  }
}

CheckpointQuant parse_awq(const json& q, const std::string& source) {
  CheckpointQuant out;
  out.method = "awq";
  out.int4 = Int4Format::kAwq;
  parse_int4_common(q, source, &out);
  if (out.group_size < 0) refuse(source, "group_size", -1, "a positive multiple of 8 for AWQ");
  if (const json* v = field(q, "version"); v != nullptr && *v != "gemm" && *v != "GEMM") {
    refuse(source, "version", *v, "\"gemm\" (GEMV, Marlin and ExLlama layouts are not read)");
  }
  if (!bool_field(q, "zero_point", source, true)) {
    refuse(source, "zero_point", false, "true");
  }
  return out;
}

CheckpointQuant parse_gptq(const json& q, const std::string& source) {
  CheckpointQuant out;
  out.method = "gptq";
  out.int4 = Int4Format::kGptq;
  parse_int4_common(q, source, &out);
  out.sym = bool_field(q, "sym", source, true);
  out.desc_act = bool_field(q, "desc_act", source, false);
  const json* f = field(q, "checkpoint_format");
  if (f != nullptr && *f != "gptq" && *f != "gptq_v2") {
    refuse(source, "checkpoint_format", *f, "\"gptq\", \"gptq_v2\"");
  }
  out.gptq_v2 = f != nullptr && *f == "gptq_v2";
  return out;
}

}  // namespace

std::string CheckpointQuant::describe() const {
  if (int4 != Int4Format::kNone) {
    std::string s = std::string("4-bit ") + (int4 == Int4Format::kAwq ? "AWQ" : "GPTQ") +
                    " (group " + (group_size < 0 ? std::string("-1") : std::to_string(group_size));
    if (int4 == Int4Format::kGptq) {
      s += std::string(sym ? ", sym" : ", asym") + (desc_act ? ", desc_act" : "") +
           (gptq_v2 ? ", gptq_v2" : "");
    }
    return s + ")";
  }
  if (!fp8) return "";
  return "fp8 e4m3 (" + method + (static_activations ? ", static activation scales" : "") + ")";
}

CheckpointQuant parse_quantize_config(const json& q, const std::string& source) {
  if (!q.is_object()) refuse(source, "", q, "an object");
  const json* method = field(q, "quant_method");
  if (method == nullptr || *method == "gptq") return parse_gptq(q, source);
  if (*method == "awq") return parse_awq(q, source);
  refuse(source, "quant_method", *method, "\"gptq\", \"awq\"");
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
  if (method != nullptr && *method == "awq") return parse_awq(*q, source);
  if (method != nullptr && *method == "gptq") return parse_gptq(*q, source);
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
      "\"fp8\", \"compressed-tensors\" with fp8 weights, \"fbgemm_fp8\", \"awq\", \"gptq\"; other "
      "checkpoints must be fp32/fp16/bf16");
}

}  // namespace llama2
