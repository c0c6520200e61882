#include "common/tuning_knobs.h"

#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <utility>
#include <vector>

#include "common/check.h"

namespace llama2 {
namespace {

// "A, B or C" for the error messages.
std::string either(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  }
  return s;
}

// One of `choices` by name; every variable's error reads "VAR=value: expected A, B or C".
template <typename E>
E choice(const char* var, const std::string& value,
         std::initializer_list<std::pair<const char*, E>> choices) {
  std::vector<std::string> names;
  for (const auto& [name, e] : choices) {
    if (value == name) return e;
    names.push_back(name);
  }
  throw Error(std::string(var) + "=" + value + ": expected " + either(names));
}

bool on_off(const char* var, const std::string& value) {
  return choice<bool>(var, value, {{"0", false}, {"1", true}});
}

// An integer in [0, 2^20], or an Error naming the variable and `range` (the allowed values).
int up_to(const char* var, const char* value, long most, const char* range) {
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  if (*end != '\0' || n < 0 || n > most) {
    throw Error(std::string(var) + "=" + value + ": expected an integer from " + range);
  }
  return static_cast<int>(n);
}

int up_to_2_20(const char* var, const char* value, const char* range) {
  return up_to(var, value, 1 << 20, range);
}

}  // namespace

StallHook parse_stall_hook(const char* text) {
  StallHook h;
  if (text == nullptr || *text == '\0') return h;
  const std::string s = text;
  std::vector<int64_t> v;  // STEP, RANK, MS: unsigned decimal fields separated by ':'
  bool ok = true;
  for (size_t pos = 0; ok;) {
    const size_t end = s.find(':', pos);
    const std::string field = s.substr(pos, end == std::string::npos ? end : end - pos);
    ok = !field.empty() && field.size() <= 12 &&
         field.find_first_not_of("0123456789") == std::string::npos;
    if (ok) v.push_back(std::stoll(field));
    if (end == std::string::npos) break;
    pos = end + 1;
  }
  ok = ok && v.size() <= 3 && v[0] >= 1 && (v.size() < 2 || v[1] <= INT_MAX);
  if (!ok) {
    throw Error(
        "LLAMA2_TEST_STALL must be STEP[:RANK[:MS]] with STEP >= 1, RANK >= 0 and MS >= 0 "
        "(0: for ever), e.g. 5:1:3000 (got \"" +
        s + "\")");
  }
  h.step = v[0];
  h.rank = v.size() > 1 ? static_cast<int>(v[1]) : 0;
  h.ms = v.size() > 2 ? v[2] : 0;
  return h;
}

TuningKnobs parse_tuning_knobs(const EnvLookup& env) {
  TuningKnobs k;
  // The value of `var`, or nullptr when unset or empty (both keep the default).
  auto get = [&](const char* var) -> const char* {
    const char* v = env(var);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* v = get("LLAMA2_GEMV")) {
    const std::string s = v;
    if (s.size() != 1 || s[0] < '0' || s[0] > '0' + kGemvKnobMaxRows) {
      throw Error("LLAMA2_GEMV=" + s + ": expected an integer from 0 (cuBLAS only) to " +
                  std::to_string(kGemvKnobMaxRows));
    }
    k.gemv_rows = s[0] - '0';
  }
  if (const char* v = get("LLAMA2_W8A16_ROWS")) {
    k.w8a16_rows = up_to_2_20("LLAMA2_W8A16_ROWS", v,
                              "0 (always dequantize + cuBLAS) to 1048576 (the most rows of an int8 "
                              "product that the W8A16 GEMM takes)");
  }
  if (const char* v = get("LLAMA2_SKINNY_ROWS")) {
    k.skinny_rows = up_to("LLAMA2_SKINNY_ROWS", v, kSkinnyKnobMaxRows,
                          "0 (cuBLAS) to 64 (the most rows of a 16-bit-weight product that the "
                          "skinny GEMM takes)");
  }
  if (const char* v = get("LLAMA2_W8A16_FP8")) k.fp8_w8a16 = on_off("LLAMA2_W8A16_FP8", v);
  if (const char* v = get("LLAMA2_FP8_TUNE")) k.fp8_tune = on_off("LLAMA2_FP8_TUNE", v);
  if (const char* v = get("LLAMA2_FP8_FUSE")) k.fp8_fuse = on_off("LLAMA2_FP8_FUSE", v);
  if (const char* v = get("LLAMA2_PDL")) k.pdl = on_off("LLAMA2_PDL", v);
  if (const char* v = get("LLAMA2_FUSE_NORM")) k.fuse_norm = on_off("LLAMA2_FUSE_NORM", v);
  if (const char* v = get("LLAMA2_FUSE_ROPE")) k.fuse_rope = on_off("LLAMA2_FUSE_ROPE", v);
  if (const char* v = get("LLAMA2_GEMV_PREFETCH_KB")) {
    k.gemv_prefetch_kb = up_to_2_20("LLAMA2_GEMV_PREFETCH_KB", v,
                                    "0 (no prefetch) to 1048576 (KiB of weights a GEMV launch "
                                    "prefetches into L2)");
  }
  if (const char* v = get("LLAMA2_DECODE_KERNEL")) {
    k.decode_kernel = choice<DecodeKernelChoice>("LLAMA2_DECODE_KERNEL", v,
                                                 {{"auto", DecodeKernelChoice::kAuto},
                                                  {"block", DecodeKernelChoice::kBlock},
                                                  {"warp", DecodeKernelChoice::kWarp}});
  }
  if (const char* v = get("LLAMA2_PREFILL_KERNEL")) {
    k.prefill_kernel = choice<PrefillKernelChoice>("LLAMA2_PREFILL_KERNEL", v,
                                                   {{"auto", PrefillKernelChoice::kAuto},
                                                    {"wmma", PrefillKernelChoice::kWmma},
                                                    {"mma", PrefillKernelChoice::kMma}});
  }
  if (const char* v = get("LLAMA2_QGEMV")) {
    k.qgemv = choice<QgemvChoice>(
        "LLAMA2_QGEMV", v,
        {{"auto", QgemvChoice::kAuto}, {"half2", QgemvChoice::kHalf2}, {"old", QgemvChoice::kOld}});
  }
  if (const char* v = get("LLAMA2_WARMUP")) k.warmup = on_off("LLAMA2_WARMUP", v);
  if (const char* v = get("LLAMA2_MIXED_DECODE")) k.mixed_decode = on_off("LLAMA2_MIXED_DECODE", v);
  if (const char* v = get("LLAMA2_DECODE_MIN_PARTITION")) {
    k.decode_min_partition =
        choice<int>("LLAMA2_DECODE_MIN_PARTITION", v,
                    {{"0", 0}, {"32", 32}, {"64", 64}, {"128", 128}, {"256", 256}, {"512", 512}});
  }
  if (const char* v = get("LLAMA2_PREFILL_SPLIT")) {
    k.prefill_split = on_off("LLAMA2_PREFILL_SPLIT", v);
  }
  if (const char* v = get("LLAMA2_OP_PROFILE")) k.op_profile = on_off("LLAMA2_OP_PROFILE", v);
  if (const char* v = get("LLAMA2_CUSTOM_ALLREDUCE")) {
    k.custom_allreduce = on_off("LLAMA2_CUSTOM_ALLREDUCE", v);
  }
  if (const char* v = get("LLAMA2_FUSE_ALLREDUCE_NORM")) {
    k.fuse_allreduce_norm = on_off("LLAMA2_FUSE_ALLREDUCE_NORM", v);
  }
  if (const char* v = get("LLAMA2_CPU_SPLIT")) {
    k.cpu_split = choice<CpuSplit>(
        "LLAMA2_CPU_SPLIT", v,
        {{"auto", CpuSplit::kAuto}, {"columns", CpuSplit::kColumns}, {"rows", CpuSplit::kRows}});
  }
  if (const char* v = get("LLAMA2_FULL_LOGITS")) k.full_logits = on_off("LLAMA2_FULL_LOGITS", v);
  if (const char* v = get("LLAMA2_STEP_LOG")) k.step_log = v;
  k.test_stall = parse_stall_hook(get("LLAMA2_TEST_STALL"));
  // A positive integer up to `max` from variable `var`, or an Error naming it and `what`.
  auto positive = [](const char* var, const char* v, long max, const char* what) {
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (*end != '\0' || n < 1 || n > max) {
      throw Error(std::string(var) + "=" + v + ": expected an integer from 1 to " +
                  std::to_string(max) + " (" + what + ")");
    }
    return static_cast<int>(n);
  };
  if (const char* v = get("LLAMA2_TEST_RANKS_PER_NODE")) {
    k.test_ranks_per_node = positive("LLAMA2_TEST_RANKS_PER_NODE", v, 1 << 20,
                                     "ranks per fake node; unset: the host name");
  }
  if (const char* v = get("LLAMA2_TEST_STEP_DELAY_MS")) {
    k.test_step_delay_ms =
        positive("LLAMA2_TEST_STEP_DELAY_MS", v, 60000, "milliseconds every step sleeps");
  }
  if (const char* v = get("LLAMA2_HTTP_THREAD_NICE")) {
    k.http_thread_nice =
        positive("LLAMA2_HTTP_THREAD_NICE", v, 19, "niceness of the HTTP connection threads");
  }
  if (const char* v = get("LLAMA2_TEST_HTTP_START_DELAY_MS")) {
    k.test_http_start_delay_ms = positive("LLAMA2_TEST_HTTP_START_DELAY_MS", v, 600000,
                                          "milliseconds between binding and loading");
  }
  return k;
}

TuningKnobs tuning_knobs_from_env() {
  return parse_tuning_knobs([](const char* var) { return std::getenv(var); });
}

}  // namespace llama2
