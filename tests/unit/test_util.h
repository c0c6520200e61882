// Helpers shared by the unit tests.
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <filesystem>
#include <fstream>
#include <string>

namespace llama2::test {

// A fresh directory under /tmp, removed with everything in it when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/llama2_test_XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return path + "/" + name; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(file(name), std::ios::binary);
    out << text;
    REQUIRE(out.good());
  }
};

}  // namespace llama2::test
