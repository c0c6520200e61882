#include "coordinator/requests/codes.h"

#include <array>

namespace llama2 {
namespace {

// Indexed by the enum's value: the static_asserts below keep each table as long as its enum.
constexpr std::array<const char*, kFinishReasonCount> kFinishNames = {"stop", "length", "cancelled",
                                                                      "timeout", "shutting_down"};
static_assert(static_cast<int>(FinishReason::kShuttingDown) + 1 == kFinishReasonCount);

constexpr std::array<const char*, kErrorCodeCount> kErrorNames = {"invalid_request",
                                                                  "prompt_too_long",
                                                                  "queue_full",
                                                                  "too_many_in_flight",
                                                                  "too_many_connections",
                                                                  "shutting_down",
                                                                  "internal",
                                                                  "unsupported_parameter",
                                                                  "model_not_found",
                                                                  "not_found",
                                                                  "body_too_large",
                                                                  "invalid_api_key",
                                                                  "starting",
                                                                  "stalled",
                                                                  "server_busy",
                                                                  "invalid_json",
                                                                  "duplicate_custom_id"};
static_assert(static_cast<int>(ErrorCode::kDuplicateCustomId) + 1 == kErrorCodeCount);

template <typename E, size_t N>
std::optional<E> find_name(const std::array<const char*, N>& names, std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (name == names[i]) return static_cast<E>(i);
  }
  return std::nullopt;
}

}  // namespace

const char* to_string(FinishReason r) {
  return kFinishNames[static_cast<size_t>(r)];
}

const char* to_string(ErrorCode c) {
  return kErrorNames[static_cast<size_t>(c)];
}

const char* to_string(SpecUse u) {
  switch (u) {
    case SpecUse::kNone:
      return "none";
    case SpecUse::kOn:
      return "on";
    case SpecUse::kOptedOut:
      return "opted_out";
    case SpecUse::kUnavailable:
      return "unavailable";
    case SpecUse::kConstrained:
      return "off_constrained";
  }
  return "none";
}

std::optional<FinishReason> parse_finish_reason(std::string_view name) {
  return find_name<FinishReason>(kFinishNames, name);
}

std::optional<ErrorCode> parse_error_code(std::string_view name) {
  return find_name<ErrorCode>(kErrorNames, name);
}

}  // namespace llama2
