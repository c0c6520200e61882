// The resume side of `llama2 batch` (load_done): which input lines an output file already answers.
// The end-to-end check (SIGKILLs, several resumes) is tests/integration/batch_resume.sh.
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "coordinator/cli/batch_io.h"

TEST_SUITE("batch_io") {
  TEST_CASE("load_done keys lines by custom_id, else by line number, and cuts a partial line") {
    char path[] = "/tmp/llama2_test_batch_io_XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    {
      std::ofstream out(path, std::ios::binary);
      out << R"({"custom_id": "a", "text": "x", "token_ids": [1], "seed": 1})"
          << "\n"
          << R"({"custom_id": null, "line": 3, "error": {"code": "invalid_json", "message": "m"}})"
          << "\n"
          << R"({"custom_id": "b", "line": 4, "error": {"code": "invalid_request", "message": "m"}})"
          << "\n"
          << R"({"custom_id": "a", "line": 5, "error": {"code": "duplicate_custom_id", "message": "m"}})"
          << "\n"
          << "not a line batch writes\n"
          << R"({"custom_id": "c", "text": "cut sh)";  // killed mid-write
    }
    const llama2::DoneLines done = llama2::load_done(path);
    // "a" is answered by its result line; the duplicate's error line answers line 5, not "a".
    CHECK(done.ids == std::set<std::string>{"a", "b"});
    CHECK(done.lines == std::set<size_t>{3, 5});
    CHECK(done.errors == 3);
    std::ifstream in(path, std::ios::binary);
    const std::string rest((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CHECK(rest.back() == '\n');
    CHECK(rest.find("cut sh") == std::string::npos);
    std::remove(path);

    const llama2::DoneLines none = llama2::load_done("/nonexistent/llama2/out.jsonl");
    CHECK(none.ids.empty());
    CHECK(none.lines.empty());
    CHECK(none.errors == 0);
  }
}
