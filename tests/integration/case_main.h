// What the server tests that run one named case per ctest entry share (watchdog_test.cpp,
// serve_counters_test.cpp): the ok/FAIL lines and their counts, and main()'s argument handling,
// scratch directory, case dispatch and exit status.
//   PROGRAM LLAMA2_BINARY MODEL_DIR MPIRUN_SH CASE [BACKEND]
#pragma once

#include <signal.h>
#include <stdlib.h>  // mkdtemp

#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace llama2_test {

// The arguments every case reads.
struct CaseEnv {
  std::string llama2, model, mpirun, tmp;  // tmp: this run's scratch directory
  std::string backend = "cpu";
  int passes = 0, failures = 0;
};
inline CaseEnv& case_env() {
  static CaseEnv env;
  return env;
}

// Prints "ok: what" or "FAIL: what" and counts it; returns ok.
inline bool check(bool ok, const std::string& what) {
  std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
  std::fflush(stdout);
  (ok ? case_env().passes : case_env().failures)++;
  return ok;
}

// main(): runs the case argv[4] names (with an optional BACKEND argv[5] when `takes_backend`);
// exit 0 when every check passed, 1 when one failed, 2 for a usage error or an unknown case.
inline int case_main(int argc, char** argv, const char* prog, const char* tmp_prefix,
                     const std::vector<std::pair<std::string, std::function<void()>>>& cases,
                     bool takes_backend = false) {
  std::string names;
  for (const auto& c : cases) names += (names.empty() ? "" : "|") + c.first;
  if (argc != 5 && !(takes_backend && argc == 6)) {
    std::fprintf(stderr, "usage: %s LLAMA2_BINARY MODEL_DIR MPIRUN_SH %s%s\n", prog, names.c_str(),
                 takes_backend ? " [BACKEND]" : "");
    return 2;
  }
  signal(SIGPIPE, SIG_IGN);
  CaseEnv& env = case_env();
  env.llama2 = argv[1];
  env.model = argv[2];
  env.mpirun = argv[3];
  if (argc == 6) env.backend = argv[5];
  const std::string which = argv[4];
  for (const auto& [name, run] : cases) {
    if (name != which) continue;
    std::string tmpl = std::string("/tmp/") + tmp_prefix + "_XXXXXX";
    env.tmp = mkdtemp(tmpl.data());
    run();
    std::printf("%d passed, %d failed\n", env.passes, env.failures);
    std::error_code ec;
    std::filesystem::remove_all(env.tmp, ec);
    return env.failures == 0 ? 0 : 1;
  }
  std::fprintf(stderr, "unknown case '%s' (%s)\n", which.c_str(), names.c_str());
  return 2;
}

}  // namespace llama2_test
