#include "common/generation_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/check.h"

namespace llama2 {
namespace {

using nlohmann::json;

const json* present(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

// A number of the file, checked against its range (`ok`, described by `range`).
template <typename Ok>
std::optional<float> number(const json& j, const char* key, const std::string& src, Ok ok,
                            const char* range) {
  const json* v = present(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number() || !std::isfinite(v->get<double>()) || !ok(v->get<double>())) {
    throw Error(src + ": \"" + key + "\" must be a number " + range + " (got " + v->dump() + ")");
  }
  return static_cast<float>(v->get<double>());
}

std::optional<int> integer(const json& j, const char* key, const std::string& src, int64_t min) {
  const json* v = present(j, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_number_integer() || v->get<int64_t>() < min ||
      v->get<int64_t>() > std::numeric_limits<int>::max()) {
    throw Error(src + ": \"" + key + "\" must be an integer >= " + std::to_string(min) + " (got " +
                v->dump() + ")");
  }
  return static_cast<int>(v->get<int64_t>());
}

}  // namespace

GenerationConfigMode parse_generation_config_mode(const std::string& s) {
  if (s == "auto") return GenerationConfigMode::kAuto;
  if (s == "ignore") return GenerationConfigMode::kIgnore;
  throw Error("--generation-config must be auto or ignore (got '" + s + "')");
}

bool GenerationDefaults::empty() const {
  return !temperature && !top_p && !repetition_penalty && !top_k && !max_new_tokens;
}

void GenerationDefaults::apply_to(SamplingParams* p) const {
  if (temperature) p->temperature = *temperature;
  if (top_p) p->top_p = *top_p;
  if (top_k) p->top_k = *top_k;
  if (repetition_penalty) p->repetition_penalty = *repetition_penalty;
  if (max_new_tokens) p->max_new_tokens = *max_new_tokens;
}

std::string GenerationDefaults::describe() const {
  std::string s;
  auto add = [&](const char* name, const std::string& value) {
    s += (s.empty() ? "" : ", ") + std::string(name) + " " + value;
  };
  // Six significant digits: 0.6f reads "0.6", 0 reads "0".
  auto num = [](float f) {
    std::ostringstream os;
    os << f;
    return os.str();
  };
  if (temperature) add("temperature", num(*temperature));
  if (top_p) add("top_p", num(*top_p));
  if (top_k) add("top_k", std::to_string(*top_k));
  if (repetition_penalty) add("repetition_penalty", num(*repetition_penalty));
  if (max_new_tokens) add("max_new_tokens", std::to_string(*max_new_tokens));
  return s;
}

GenerationDefaults parse_generation_config(const json& j, const std::string& src) {
  if (!j.is_object()) throw Error(src + ": expected a JSON object");
  GenerationDefaults g;
  g.source = src;
  g.temperature = number(
      j, "temperature", src, [](double x) { return x >= 0; }, ">= 0");
  g.top_p = number(
      j, "top_p", src, [](double x) { return x > 0 && x <= 1; }, "in (0, 1]");
  g.repetition_penalty = number(
      j, "repetition_penalty", src, [](double x) { return x > 0; }, "> 0");
  g.min_p = number(
      j, "min_p", src, [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]");
  g.top_k = integer(j, "top_k", src, 0);
  g.max_new_tokens = integer(j, "max_new_tokens", src, 1);
  return g;
}

GenerationDefaults load_generation_config(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return {};
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot open");
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = json::parse(ss.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw Error(path + ": not valid JSON");
  return parse_generation_config(j, path);
}

}  // namespace llama2
