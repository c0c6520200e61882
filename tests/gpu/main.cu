// doctest runner for the CUDA kernel tests (ctest `gpu`, label gpu). Without a visible CUDA device
// every test case that needs one reports "no CUDA device: skipped" and passes (the launch-error
// cases, which never reach the device, run everywhere).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
