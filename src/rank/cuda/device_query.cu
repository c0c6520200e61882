// Device discovery for backend selection. Never fails: no driver or no device means 0 devices.
#include <cuda_runtime.h>
#include <nccl.h>

namespace llama2 {

int cuda_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error for later callers
    return 0;
  }
  return n;
}

// Linked here so a CPU-only machine proves the NCCL dependency resolves at link time.
int nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

}  // namespace llama2
