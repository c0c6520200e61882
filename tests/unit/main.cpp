// doctest runner for the unit tests (one binary; ctest runs it as the `unit` test).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
