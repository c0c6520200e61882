// llama2_bench_allreduce: the tensor-parallel all-reduce on one node's GPUs (issue 21's row
// "one-shot all-reduce 8 KB <= 5 us, with NCCL's figure beside it"), through the engine's own
// communicator (rank/cuda/nccl_comm.h) so that it measures what a decode step runs:
//   - fp16 all-reduce of 2 KB .. 512 KB: the one-shot NVLink kernel (messages up to
//     NcclComm::kOneShotBytes; larger ones go to NCCL in the same communicator) against NCCL
//     alone (a second communicator built with custom_allreduce off);
//   - the reduction after o / down fused with the residual add and the next RMSNorm
//     (all_reduce_add_rmsnorm, LLAMA2_FUSE_ALLREDUCE_NORM=1) against the all-reduce followed by
//     launch_add_rmsnorm, for 7B / 13B / 70B rows (hidden 4096 / 5120 / 8192, 1-2 rows).
// Each figure: us per call, the median of 5 CUDA-graph replays of 100 calls captured back to back
// on one stream (what a decode step's graph does: no host launch cost), and the eager figure (100
// calls launched one by one) beside it.
//
//   NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 mpirun -np 2
//       -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS
//       build-gpu/llama2_bench_allreduce
//
// One rank per GPU of this node (rank r on device r % devices); prints on rank 0.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/check.h"
#include "kernels/rmsnorm.cuh"
#include "rank/cuda/device_buffer.h"
#include "rank/cuda/nccl_comm.h"

using llama2::DeviceBuffer;
using llama2::NcclComm;

namespace {

constexpr int kCalls = 100;

// Microseconds per call of `call` on `stream`: the median of 5 timed runs of kCalls calls, as
// one CUDA graph (graph = true) or launched one by one, after a warm-up run. Every rank times the
// same sequence (the calls are collectives); MPI_Barrier lines the ranks up before each run.
double time_calls(cudaStream_t stream, bool graph, const std::function<void()>& call) {
  cudaGraphExec_t exec = nullptr;
  if (graph) {
    cudaGraph_t g;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < kCalls; ++i) call();
    CUDA_CHECK(cudaStreamEndCapture(stream, &g));
    CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
    CUDA_CHECK(cudaGraphDestroy(g));
  }
  auto run = [&] {
    if (graph) {
      CUDA_CHECK(cudaGraphLaunch(exec, stream));
    } else {
      for (int i = 0; i < kCalls; ++i) call();
    }
  };
  run();
  CUDA_CHECK(cudaStreamSynchronize(stream));
  cudaEvent_t a, b;
  CUDA_CHECK(cudaEventCreate(&a));
  CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int rep = 0; rep < 5; ++rep) {
    MPI_Barrier(MPI_COMM_WORLD);
    CUDA_CHECK(cudaEventRecord(a, stream));
    run();
    CUDA_CHECK(cudaEventRecord(b, stream));
    CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CUDA_CHECK(cudaEventDestroy(a));
  CUDA_CHECK(cudaEventDestroy(b));
  if (exec != nullptr) CUDA_CHECK(cudaGraphExecDestroy(exec));
  std::sort(ms.begin(), ms.end());
  return ms[2] * 1e3 / kCalls;
}

void fill(DeviceBuffer& buf, size_t n, float value) {
  std::vector<__half> host(n, __float2half(value));
  CUDA_CHECK(cudaMemcpy(buf.as<void>(), host.data(), n * sizeof(__half), cudaMemcpyHostToDevice));
}

void run(int rank, int size) {
  int devices = 0;
  CUDA_CHECK(cudaGetDeviceCount(&devices));
  CUDA_CHECK(cudaSetDevice(rank % devices));
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    NcclComm one_shot(MPI_COMM_WORLD, stream, /*custom_allreduce=*/true, /*fuse_norm=*/true);
    NcclComm nccl(MPI_COMM_WORLD, stream, /*custom_allreduce=*/false, /*fuse_norm=*/false);
    const size_t max_bytes = 512 * 1024;
    DeviceBuffer data(max_bytes, "all-reduce data");
    fill(data, max_bytes / 2, 0.f);  // zeros: in-place sums stay finite (values are the tests' job)
    if (rank == 0) {
      std::printf("fp16 all-reduce, %d ranks, us per call (graph of %d calls / eager)\n", size,
                  kCalls);
      std::printf("%9s | %17s | %17s\n", "bytes", "engine (one-shot)", "NCCL");
    }
    for (const size_t bytes : {2048, 8192, 16384, 65536, 524288}) {
      const size_t n = bytes / 2;
      double t[2][2];  // [engine, nccl][graph, eager]
      for (int which = 0; which < 2; ++which) {
        NcclComm& comm = which == 0 ? one_shot : nccl;
        for (int graph = 0; graph < 2; ++graph) {
          t[which][graph] = time_calls(stream, graph == 0, [&] {
            comm.all_reduce_sum(data.as<void>(), n, llama2::CommType::kF16);
          });
        }
      }
      if (rank == 0) {
        std::printf("%9zu | %7.2f / %7.2f | %7.2f / %7.2f%s\n", bytes, t[0][0], t[0][1], t[1][0],
                    t[1][1], bytes > NcclComm::kOneShotBytes ? "  (engine: NCCL above 16 KB)" : "");
      }
    }

    // The reduction after o / down with the residual add and the next RMSNorm.
    if (rank == 0) {
      std::printf("\nall-reduce + residual add + RMSNorm, fp16, us per call (graph / eager)\n");
      std::printf("%6s %4s | %17s | %17s\n", "hidden", "rows", "fused", "all-reduce + norm");
    }
    const float eps = 1e-5f;
    for (const int hidden : {4096, 5120, 8192}) {
      for (const int rows : {1, 2}) {
        const size_t n = static_cast<size_t>(rows) * hidden;
        if (n * 2 > NcclComm::kOneShotBytes) continue;
        DeviceBuffer partial(n * 2, "partial"), residual(n * 2, "residual"), out(n * 2, "out"),
            weight(static_cast<size_t>(hidden) * 2, "norm weight");
        fill(weight, hidden, 1.f);
        const llama2::AddRmsNorm norm{
            residual.as<void>(), weight.as<void>(), out.as<void>(), rows, hidden, eps};
        double t[2][2];  // [fused, unfused][graph, eager]
        bool fused_taken = true;
        for (int which = 0; which < 2; ++which) {
          for (int graph = 0; graph < 2; ++graph) {
            fill(partial, n, 0.f);
            fill(residual, n, 0.f);
            t[which][graph] = time_calls(stream, graph == 0, [&] {
              if (which == 0) {
                fused_taken = one_shot.all_reduce_add_rmsnorm(partial.as<void>(),
                                                              llama2::CommType::kF16, norm) &&
                              fused_taken;
              } else {
                one_shot.all_reduce_sum(partial.as<void>(), n, llama2::CommType::kF16);
                CUDA_CHECK(llama2::kernels::launch_add_rmsnorm<__half>(
                    residual.as<__half>(), partial.as<__half>(), weight.as<__half>(), rows, hidden,
                    eps, out.as<__half>(), stream));
              }
            });
          }
        }
        if (rank == 0) {
          std::printf("%6d %4d | %7.2f / %7.2f | %7.2f / %7.2f%s\n", hidden, rows, t[0][0], t[0][1],
                      t[1][0], t[1][1],
                      fused_taken ? "" : "  (fused form refused: the one-shot path is off)");
        }
      }
    }
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  try {
    run(rank, size);
  } catch (const std::exception& e) {
    // The other ranks may be inside a collective: end them all rather than leave them waiting.
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
