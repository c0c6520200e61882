// 8-lane fp32 / int32 vectors (GCC/Clang vector extensions) for the CPU backend's hot loops. The
// compiler lowers them to SSE or AVX as the function's target allows: hot functions carry
// target_clones("arch=x86-64-v3", "default"), so one binary runs on any x86-64 and uses AVX2/FMA
// where the CPU has it.
#pragma once

#include <cstdint>
#include <cstring>

// A hot function is a LLAMA2_CPU_CLONES wrapper around a LLAMA2_CPU_BODY: the body, compiled
// without a target, is inlined into each clone and compiled there for its target. The helpers the
// body calls with 8-lane vectors by value (load8, exp8, lambdas) are thereby called from a function
// of the same target as theirs; called straight from a clone of another target, clang refuses the
// call ("AVX vector argument ... changes the ABI"), where GCC inlines them.
#define LLAMA2_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#define LLAMA2_CPU_BODY __attribute__((always_inline)) inline

namespace llama2::cpu {

typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

// Unaligned loads and stores of 8 floats. Internal linkage (static): each file gets its own copy,
// compiled for the target of the function it is inlined into, and no ABI crosses files.
static inline v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
static inline void store8(float* p, v8f v) {
  std::memcpy(p, &v, sizeof(v));
}

}  // namespace llama2::cpu
