# Sourced by the project's scripts: environment every build and mpirun of llama2 needs.
# - nvcc lives in /usr/local/cuda/bin on the CUDA machines and may not be on PATH;
# - Open MPI refuses to run as root (CI, containers, the GPU nodes) unless told it is intended;
# - NVLink multicast stays off (site policy on the GPU nodes), forwarded to every rank by mpirun -x.
if [[ -x /usr/local/cuda/bin/nvcc && -z "${CUDACXX:-}" ]] && ! command -v nvcc >/dev/null; then
  export CUDACXX=/usr/local/cuda/bin/nvcc
fi
if [[ $(id -u) -eq 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LLAMA2_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# ccache: paths under the tree are hashed relative to it, and the build directory is not hashed,
# so two clones or work trees share each other's objects (debug info then names the first one).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$LLAMA2_ROOT} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
LLAMA2_BUILD=${LLAMA2_BUILD:-$LLAMA2_ROOT/build}

# llama2_configure [cmake args]: configure $LLAMA2_BUILD once (the args count only then), and again
# whenever an optional part that the last configure looked for and did not find has appeared
# since (CMake records them in LLAMA2_OPTIONAL_MISSING: a JDK, JNA, JUnit, nvcc), so that the
# README's demo and test commands run every test in either order.
llama2_configure() {
  if [[ ! -f "$LLAMA2_BUILD/build.ninja" ]]; then
    local launcher=()
    # ccache (when installed) lets several work trees and rebuilds share compiled objects.
    if command -v ccache >/dev/null; then
      launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
    fi
    cmake -S "$LLAMA2_ROOT" -B "$LLAMA2_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DLLAMA2_WERROR="${LLAMA2_WERROR:-ON}" "${launcher[@]}" "$@"
    return
  fi
  local appeared
  appeared=$(llama2_appeared_parts "$LLAMA2_BUILD/CMakeCache.txt")
  if [[ -n "$appeared" ]]; then
    echo "llama2: found since the last configure: $appeared; reconfiguring $LLAMA2_BUILD"
    cmake -S "$LLAMA2_ROOT" -B "$LLAMA2_BUILD"
  fi
}

# llama2_appeared_parts CACHE: the entries of CACHE's LLAMA2_OPTIONAL_MISSING that exist now.
llama2_appeared_parts() {
  local line entry found=()
  line=$(grep -m1 '^LLAMA2_OPTIONAL_MISSING:INTERNAL=' "$1" 2>/dev/null) || return 0
  local IFS=';'
  for entry in ${line#*=}; do
    case "$entry" in
      program:*) command -v "${entry#program:}" >/dev/null && found+=("${entry#program:}") ;;
      file:*) [[ -e "${entry#file:}" ]] && found+=("${entry#file:}") ;;
    esac
  done
  echo "${found[*]}"
}

# llama2_build [cmake args]: llama2_configure, then build everything with ninja.
llama2_build() {
  llama2_configure "$@"
  cmake --build "$LLAMA2_BUILD" -j "$(nproc)"
}
