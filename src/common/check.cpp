#include "common/check.h"

namespace llama2 {
namespace {
int g_error_rank = -1;
}

void set_error_rank(int rank) {
  g_error_rank = rank;
}
int error_rank() {
  return g_error_rank;
}

void fail_check(const char* kind, const char* expr, const std::string& detail, const char* file,
                int line) {
  std::string msg = std::string(kind) + " check failed: " + expr;
  if (!detail.empty()) msg += " (" + detail + ")";
  msg += " at " + std::string(file) + ":" + std::to_string(line);
  if (g_error_rank >= 0) msg += " on rank " + std::to_string(g_error_rank);
  throw Error(msg);
}

}  // namespace llama2
