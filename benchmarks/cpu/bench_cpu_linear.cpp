// cpu::linear alone: microseconds and multiply-adds per second for the tiny and the 59 MB CPU
// models' projection shapes at 1, 8 and 32 rows, on 1 and 2 threads, on weights packed once as the
// CPU backend packs them at load: what batch rows gain from sharing each weight load.
//
//   build/llama2_bench_cpu_linear        (no MPI; best of 5 runs of >= 20M multiply-adds per cell)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "rank/cpu_ops.h"

int main() {
  struct Shape {
    const char* what;
    int in, out;
  };
  const Shape shapes[] = {{"tiny q|k|v", 64, 96},      {"tiny gate+up", 64, 344},
                          {"tiny down", 172, 64},      {"tiny lm head", 64, 512},
                          {"59MB gate+up", 512, 2752}, {"59MB down", 1376, 512}};
  llama2::ThreadPool pool(2);
  std::printf("| shape | in x out | rows | threads | us | GMAC/s |\n|---|---|---|---|---|---|\n");
  for (const Shape& s : shapes) {
    for (int rows : {1, 8, 32}) {
      for (int threads : {1, 2}) {
        std::vector<float> x(static_cast<size_t>(rows) * s.in, 0.5f);
        const std::vector<float> w(static_cast<size_t>(s.in) * s.out, 0.25f);
        const llama2::cpu::PackedLinear packed = llama2::cpu::pack_linear(w.data(), s.out, s.in);
        std::vector<float> out(static_cast<size_t>(rows) * s.out);
        auto call = [&] {
          llama2::cpu::linear(x.data(), packed, rows, out.data(), s.out,
                              threads == 2 ? &pool : nullptr);
        };
        const int64_t macs = int64_t{rows} * s.in * s.out;
        const int n = static_cast<int>(20'000'000 / macs) + 10;
        for (int i = 0; i < n / 10; ++i) call();  // warm caches and workers
        double best = 1e30;
        for (int r = 0; r < 5; ++r) {
          const auto t0 = std::chrono::steady_clock::now();
          for (int i = 0; i < n; ++i) call();
          const std::chrono::duration<double, std::micro> dt =
              std::chrono::steady_clock::now() - t0;
          best = std::min(best, dt.count() / n);
        }
        std::printf("| %s | %d x %d | %d | %d | %.2f | %.1f |\n", s.what, s.in, s.out, rows,
                    threads, best, static_cast<double>(macs) / best / 1e3);
      }
    }
  }
  return 0;
}
