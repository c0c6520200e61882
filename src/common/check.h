// The one error-checking header of the project.
//
// Every check is built on LLAMA2_CHECK_MSG, which throws llama2::Error with the failing expression,
// file:line and the MPI rank (when known). Checks never compile to nothing. Only the rank layer's
// entry points (main, the worker loop) turn an Error into an exit; libraries, the coordinator and
// the JVM shim report it instead of dying.
#pragma once

#include <stdexcept>
#include <string>

namespace llama2 {

// An error with a message meant for the user: it names the file, tensor, flag or parameter at
// fault.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The rank that prefixes check failures; set once after MPI_Init (-1: not known yet).
void set_error_rank(int rank);
int error_rank();

[[noreturn]] void fail_check(const char* kind, const char* expr, const std::string& detail,
                             const char* file, int line);

// Why the last kernel launcher on this thread refused its arguments, in the words of the failed
// check, e.g. "launch_rmsnorm: hidden > 0 failed (hidden 0)"; "" when none. Launchers keep the
// house signature (they return cudaErrorInvalidValue) and record the reason with
// LLAMA2_LAUNCH_REQUIRE; CUDA_CHECK takes it, so the user reads the check instead of "invalid
// argument". Thread-local like cudaGetLastError, and header-only so that the kernels library
// needs nothing else from the engine.
inline std::string& launch_error_slot() {
  thread_local std::string text;
  return text;
}
inline void set_launch_error(const char* launcher, const char* check, const std::string& detail) {
  std::string& text = launch_error_slot();
  text = std::string(launcher) + ": " + check + " failed";
  if (!detail.empty()) text += " (" + detail + ")";
}
// The recorded reason, which is cleared.
inline std::string take_launch_error() {
  std::string text;
  text.swap(launch_error_slot());
  return text;
}
// CUDA_CHECK's detail: the error's name and text, then the launcher's reason when a launcher
// refused its arguments (only cudaErrorInvalidValue comes from a refusal).
inline std::string cuda_error_detail(const char* name, const char* text, bool invalid_value) {
  std::string detail = std::string(name) + ": " + text;
  std::string reason = take_launch_error();
  if (invalid_value && !reason.empty()) detail += "; " + reason;
  return detail;
}

}  // namespace llama2

#define LLAMA2_CHECK_MSG(kind, cond, expr_text, detail)                               \
  do {                                                                                \
    if (!(cond)) ::llama2::fail_check(kind, expr_text, (detail), __FILE__, __LINE__); \
  } while (0)

// Internal invariants (not user errors): LLAMA2_CHECK(n > 0).
#define LLAMA2_CHECK(cond) LLAMA2_CHECK_MSG("check", (cond), #cond, std::string())

#define MPI_CHECK(call)                                                   \
  do {                                                                    \
    int llama2_mpi_rc_ = (call);                                          \
    LLAMA2_CHECK_MSG("MPI", llama2_mpi_rc_ == 0 /* MPI_SUCCESS */, #call, \
                     "MPI error code " + std::to_string(llama2_mpi_rc_)); \
  } while (0)

// CUDA-side checks. Defined unconditionally: a macro only names cudaError_t, cublasStatus_t or
// ncclResult_t where it is used, so the file that uses one includes that library's header, in any
// order relative to this one (an #if on the library's version macro made include order matter).
#define CUDA_CHECK(call)                                                                     \
  do {                                                                                       \
    cudaError_t llama2_cuda_rc_ = (call);                                                    \
    LLAMA2_CHECK_MSG("CUDA", llama2_cuda_rc_ == cudaSuccess, #call,                          \
                     ::llama2::cuda_error_detail(cudaGetErrorName(llama2_cuda_rc_),          \
                                                 cudaGetErrorString(llama2_cuda_rc_),        \
                                                 llama2_cuda_rc_ == cudaErrorInvalidValue)); \
  } while (0)
#define CUBLAS_CHECK(call)                                                        \
  do {                                                                            \
    cublasStatus_t llama2_cublas_rc_ = (call);                                    \
    LLAMA2_CHECK_MSG("cuBLAS", llama2_cublas_rc_ == CUBLAS_STATUS_SUCCESS, #call, \
                     std::string(cublasGetStatusString(llama2_cublas_rc_)));      \
  } while (0)
#define NCCL_CHECK(call)                                                \
  do {                                                                  \
    ncclResult_t llama2_nccl_rc_ = (call);                              \
    LLAMA2_CHECK_MSG("NCCL", llama2_nccl_rc_ == ncclSuccess, #call,     \
                     std::string(ncclGetErrorString(llama2_nccl_rc_))); \
  } while (0)

// In a kernel launcher: unless `cond` holds, records why (the launcher's name, the check and
// `detail`, a std::string built only on failure, e.g. "hidden " + std::to_string(hidden)) and
// returns cudaErrorInvalidValue.
#define LLAMA2_LAUNCH_REQUIRE(cond, detail)                  \
  do {                                                       \
    if (!(cond)) {                                           \
      ::llama2::set_launch_error(__func__, #cond, (detail)); \
      return cudaErrorInvalidValue;                          \
    }                                                        \
  } while (0)
