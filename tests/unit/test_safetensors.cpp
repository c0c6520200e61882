// Safetensors reading (rank side) and writing (tools side): conversions, round trips, shard block
// reads, sharded directories, and one test per malformed-input error.
#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/check.h"
#include "rank/safetensors.h"
#include "rank/weight_store.h"
#include "test_util.h"
#include "tools/safetensors_writer.h"

namespace {

using llama2::test::contains;
using llama2::test::error_of;

using llama2::DType;
using llama2::Error;
using llama2::TensorToWrite;
using llama2::WeightStore;

using llama2::test::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

// A safetensors file with a hand-written header and `data_size` zero bytes of data.
void write_raw_safetensors(const std::string& path, const std::string& header, size_t data_size) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_bytes(path, bytes + header + std::string(data_size, '\0'));
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Values exact in fp32, fp16 and bf16 (integers below 256), distinct per element.
std::vector<float> small_ints(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>(i) - 45);
  return v;
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

TEST_SUITE("safetensors") {
  TEST_CASE("fp16 and bf16 conversions round to nearest even") {
    using llama2::f32_to_bf16;
    using llama2::f32_to_f16;
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_f16(-2.0f) == 0xC000);
    CHECK(f32_to_f16(0.1f) == 0x2E66);
    CHECK(f32_to_f16(-0.0f) == 0x8000);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(f32_to_f16(65519.0f) == 0x7BFF);  // below the halfway point to 65536
    CHECK(f32_to_f16(65520.0f) == 0x7C00);  // halfway, odd mantissa: rounds to inf
    CHECK(f32_to_f16(1e10f) == 0x7C00);
    CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
    const uint16_t h_nan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
    CHECK((h_nan & 0x7C00) == 0x7C00);
    CHECK((h_nan & 0x03FF) != 0);
    // Halfway cases in the normal range: 1 + 2^-11 lies between 0x3C00 (even) and 0x3C01.
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);
    CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);
    // Subnormals (unit 2^-24) and the boundary to zero.
    CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);
    CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
    CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // halfway to 0x0001: even is zero
    CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 units: to even 2
    CHECK(f32_to_f16(std::ldexp(5.0f, -25)) == 0x0002);  // 2.5 units: to even 2
    CHECK(f32_to_f16(-std::ldexp(1.0f, -30)) == 0x8000);
    CHECK(f32_to_f16(std::ldexp(1023.5f, -24)) == 0x0400);  // rounds up into the normals
    // bf16: 1 + 2^-8 is halfway between 0x3F80 (even) and 0x3F81.
    CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);
    CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);
    CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
    CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // rounds up to inf
    CHECK(f32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
    // A NaN whose payload sits only in the low 16 bits must not truncate to inf.
    const uint16_t b_nan = f32_to_bf16(bits_to_float(0x7F800001u));
    CHECK((b_nan & 0x7F80) == 0x7F80);
    CHECK((b_nan & 0x007F) != 0);
  }

  TEST_CASE("half-precision widening is exact and inverts the narrowing") {
    CHECK(llama2::f16_to_f32(0x3C00) == 1.0f);
    CHECK(llama2::f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(llama2::f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(llama2::f16_to_f32(0x8000) == 0.0f);
    CHECK(std::signbit(llama2::f16_to_f32(0x8000)));
    CHECK(llama2::f16_to_f32(0xFC00) == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(llama2::f16_to_f32(0x7E00)));
    CHECK(llama2::bf16_to_f32(0x3F80) == 1.0f);
    CHECK(std::isnan(llama2::bf16_to_f32(0x7FC0)));
    // Exhaustive: every non-NaN half value survives f16 -> f32 -> f16 (and bf16 likewise).
    int bad_f16 = 0, bad_bf16 = 0;
    for (uint32_t i = 0; i < 65536; ++i) {
      const uint16_t h = static_cast<uint16_t>(i);
      const float f = llama2::f16_to_f32(h);
      if (std::isnan(f) ? (h & 0x7C00) != 0x7C00 : llama2::f32_to_f16(f) != h) ++bad_f16;
      const float b = llama2::bf16_to_f32(h);
      if (std::isnan(b) ? (h & 0x7F80) != 0x7F80 : llama2::f32_to_bf16(b) != h) ++bad_bf16;
    }
    CHECK(bad_f16 == 0);
    CHECK(bad_bf16 == 0);
  }

#if defined(__FLT16_MAX__)
  TEST_CASE("f32_to_f16 agrees with the compiler's _Float16 conversion") {
    // The compiler's conversion is an independent round-to-nearest-even reference; sample the
    // whole fp32 range with a fixed-seed LCG (every exponent, both signs).
    uint32_t state = 12345;
    int mismatches = 0;
    for (int i = 0; i < 2000000; ++i) {
      state = state * 1664525u + 1013904223u;
      const float f = bits_to_float(state);
      if (std::isnan(f)) continue;
      const _Float16 ref = static_cast<_Float16>(f);
      uint16_t ref_bits;
      std::memcpy(&ref_bits, &ref, 2);
      if (llama2::f32_to_f16(f) != ref_bits) ++mismatches;
    }
    CHECK(mismatches == 0);
  }
#endif

  TEST_CASE("write and read back F32, F16 and BF16") {
    TempDir dir;
    const float halfway_bf16 = 1.0f + std::ldexp(1.0f, -8);
    const std::vector<float> values = {1.0f, -2.5f, 0.1f, halfway_bf16, 65504.0f, -0.0f};
    std::vector<TensorToWrite> ts = {{"a.f32", DType::F32, {2, 3}, values},
                                     {"b.f16", DType::F16, {6}, values},
                                     {"c.bf16", DType::BF16, {3, 2}, values}};
    llama2::write_safetensors(dir.file("model.safetensors"), ts, {{"note", "test"}});
    WeightStore ws = WeightStore::open(dir.path);
    CHECK(ws.files() == std::vector<std::string>{"model.safetensors"});
    CHECK(ws.dir() == dir.path);
    CHECK(ws.has("a.f32"));
    CHECK_FALSE(ws.has("z"));

    std::vector<float> out(6);
    ws.read_vector_f32("a.f32", out.data());
    CHECK(out == values);
    ws.read_vector_f32("b.f16", out.data());
    CHECK(out[0] == 1.0f);
    CHECK(out[1] == -2.5f);
    CHECK(out[2] == 0.0999755859375f);  // 0x2E66
    CHECK(out[4] == 65504.0f);
    ws.read_block_f32("c.bf16", 0, 3, 0, 2, out.data());
    CHECK(out[0] == 1.0f);
    CHECK(out[3] == 1.0f);  // halfway value rounded to even
    CHECK(out[1] == -2.5f);

    uint16_t raw[6];
    ws.read_block_raw("b.f16", 0, 1, 0, 6, raw);
    CHECK(raw[0] == 0x3C00);
    CHECK(raw[5] == 0x8000);
    ws.read_block_raw("c.bf16", 0, 3, 0, 2, raw);
    CHECK(raw[0] == 0x3F80);
    CHECK(raw[3] == 0x3F80);

    const llama2::TensorInfo& t = ws.get("b.f16");
    CHECK(t.dtype == DType::F16);
    CHECK(t.dtype_name == "F16");
    CHECK(t.shape == std::vector<int64_t>{6});
    CHECK(t.begin == 24);  // stored after a.f32, in the given order
    CHECK(t.end == 36);
    CHECK(t.file->metadata().at("format") == "pt");
    CHECK(t.file->metadata().at("note") == "test");
  }

  TEST_CASE("written header follows the Hugging Face layout") {
    TempDir dir;
    const std::string path = dir.file("x.safetensors");
    llama2::write_safetensors(path,
                              {{"w", DType::BF16, {3}, {1, 2, 3}}, {"e", DType::F32, {0}, {}}});
    const std::string bytes = read_all(path);
    REQUIRE(bytes.size() >= 8);
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
    CHECK((8 + n) % 8 == 0);  // data section 8-byte aligned
    CHECK(bytes.size() == 8 + n + 6);
    CHECK(bytes[8] == '{');
    const auto header = nlohmann::json::parse(bytes.substr(8, n));
    CHECK(header["w"]["dtype"] == "BF16");
    CHECK(header["w"]["shape"] == nlohmann::json::array({3}));
    CHECK(header["w"]["data_offsets"] == nlohmann::json::array({0, 6}));
    CHECK(header["e"]["data_offsets"] == nlohmann::json::array({6, 6}));
    CHECK(header["__metadata__"]["format"] == "pt");
    CHECK_FALSE(std::filesystem::exists(path + ".tmp." + std::to_string(getpid())));
  }

  TEST_CASE("block reads of an odd shape copy exactly the block") {
    TempDir dir;
    const int64_t rows = 7, cols = 13;
    const std::vector<float> m = small_ints(rows * cols);
    llama2::write_safetensors(dir.file("model.safetensors"),
                              {{"f32", DType::F32, {rows, cols}, m},
                               {"f16", DType::F16, {rows, cols}, m},
                               {"bf16", DType::BF16, {rows, cols}, m}});
    WeightStore ws = WeightStore::open(dir.path);
    struct Case {
      int64_t r0, r1, c0, c1;
    };
    const Case cases[] = {{2, 5, 0, cols},   // row shard (one contiguous range)
                          {0, rows, 3, 9},   // column shard (one range per row)
                          {1, 6, 4, 11},     // interior block
                          {6, 7, 12, 13},    // last element
                          {3, 3, 0, cols}};  // empty
    for (const char* name : {"f32", "f16", "bf16"}) {
      const size_t es = llama2::dtype_size(ws.get(name).dtype);
      for (const Case& c : cases) {
        CAPTURE(name);
        CAPTURE(c.r0);
        CAPTURE(c.c0);
        const size_t h = static_cast<size_t>(c.r1 - c.r0), w = static_cast<size_t>(c.c1 - c.c0);
        std::vector<float> out(h * w + 1, 999.0f);  // one guard element past the block
        const uint64_t before = ws.bytes_copied();
        ws.read_block_f32(name, c.r0, c.r1, c.c0, c.c1, out.data());
        CHECK(ws.bytes_copied() - before == h * w * es);
        int wrong = 0;
        for (size_t r = 0; r < h; ++r) {
          for (size_t k = 0; k < w; ++k) {
            if (out[r * w + k] != m[(c.r0 + r) * cols + c.c0 + k]) ++wrong;
          }
        }
        CHECK(wrong == 0);
        CHECK(out[h * w] == 999.0f);

        std::vector<uint8_t> raw(h * w * es);
        const uint64_t before_raw = ws.bytes_copied();
        ws.read_block_raw(name, c.r0, c.r1, c.c0, c.c1, raw.data());
        CHECK(ws.bytes_copied() - before_raw == h * w * es);
        const llama2::TensorInfo& t = ws.get(name);
        int wrong_raw = 0;
        for (size_t r = 0; r < h; ++r) {
          const uint8_t* src = t.file->data() + t.begin + ((c.r0 + r) * cols + c.c0) * es;
          if (w && std::memcmp(raw.data() + r * w * es, src, w * es) != 0) ++wrong_raw;
        }
        CHECK(wrong_raw == 0);
      }
    }
  }

  TEST_CASE("1-D tensors read as one row; out-of-range blocks are errors") {
    TempDir dir;
    llama2::write_safetensors(dir.file("model.safetensors"),
                              {{"norm.weight", DType::BF16, {5}, {1, 2, 3, 4, 5}},
                               {"w", DType::F32, {2, 2}, {1, 2, 3, 4}}});
    WeightStore ws = WeightStore::open(dir.path);
    float out[5];
    ws.read_block_f32("norm.weight", 0, 1, 1, 4, out);
    CHECK(out[0] == 2.0f);
    CHECK(out[2] == 4.0f);
    std::string msg = error_of([&] { ws.read_block_f32("w", 0, 3, 0, 2, out); });
    CHECK(contains(msg, "model.safetensors"));
    CHECK(contains(msg, "'w'"));
    CHECK(contains(msg, "[2, 2]"));
    msg = error_of([&] { ws.read_block_f32("w", 0, 1, 2, 1, out); });
    CHECK(contains(msg, "outside"));
    msg = error_of([&] { ws.read_block_raw("w", -1, 1, 0, 1, out); });
    CHECK(contains(msg, "outside"));
  }

  TEST_CASE("sharded directory with an index") {
    TempDir dir;
    const std::string s1 = "model-00001-of-00002.safetensors";
    const std::string s2 = "model-00002-of-00002.safetensors";
    llama2::write_safetensors(dir.file(s1), {{"embed", DType::F16, {2, 3}, small_ints(6)},
                                             {"layer0", DType::F32, {3}, {7, 8, 9}}});
    llama2::write_safetensors(dir.file(s2), {{"layer1", DType::BF16, {4, 2}, small_ints(8)},
                                             {"unlisted", DType::F32, {1}, {0}}});
    llama2::write_safetensors_index(dir.file("model.safetensors.index.json"),
                                    {{"embed", s1}, {"layer0", s1}, {"layer1", s2}}, 12 + 12 + 16);
    const auto index = nlohmann::json::parse(read_all(dir.file("model.safetensors.index.json")));
    CHECK(index["metadata"]["total_size"] == 40);
    CHECK(index["weight_map"]["layer1"] == s2);

    WeightStore ws = WeightStore::open(dir.path);
    CHECK(ws.files() == std::vector<std::string>{s1, s2});
    CHECK(contains(ws.get("layer1").file->path(), s2));
    CHECK(contains(ws.get("embed").file->path(), s1));
    CHECK_FALSE(ws.has("unlisted"));  // the index is authoritative
    ws.expect_shape("layer1", {4, 2});
    float out[8];
    ws.read_block_f32("layer1", 1, 3, 0, 2, out);
    CHECK(out[0] == -43.0f);
    CHECK(out[3] == -40.0f);
    ws.read_vector_f32("layer0", out);
    CHECK(out[2] == 9.0f);
    // Moving the store keeps the tensors (and their file pointers) valid.
    WeightStore moved = std::move(ws);
    CHECK(moved.get("embed").file->find("embed") == &moved.get("embed"));
    const std::string msg = error_of([&] { moved.get("lm_head.weight"); });
    CHECK(contains(msg, "'lm_head.weight'"));
    CHECK(contains(msg, dir.path));
    CHECK(contains(msg, s1 + ", " + s2));
  }

  TEST_CASE("errors: missing directory, empty directory, missing tensor, wrong shape") {
    TempDir dir;
    std::string msg = error_of([&] { WeightStore::open(dir.file("nope")); });
    CHECK(contains(msg, dir.file("nope")));
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, dir.path));
    CHECK(contains(msg,
                   "neither model.safetensors, model.safetensors.index.json, pytorch_model.bin nor "
                   "pytorch_model.bin.index.json found"));
    msg = error_of([&] { llama2::SafetensorsFile f(dir.file("absent.safetensors")); });
    CHECK(contains(msg, "absent.safetensors"));
    CHECK(contains(msg, "No such file"));

    llama2::write_safetensors(
        dir.file("model.safetensors"),
        {{"model.layers.3.mlp.up_proj.weight", DType::F16, {7, 13}, small_ints(91)}});
    WeightStore ws = WeightStore::open(dir.path);
    msg = error_of([&] { ws.get("model.norm.weight"); });
    CHECK(contains(msg, "tensor 'model.norm.weight' not found in " + dir.path));
    CHECK(contains(msg, "(files: model.safetensors)"));
    msg = error_of([&] { ws.expect_shape("model.layers.3.mlp.up_proj.weight", {7, 12}); });
    CHECK(contains(msg, "model.safetensors"));
    CHECK(contains(msg, "'model.layers.3.mlp.up_proj.weight' has shape [7, 13], expected [7, 12]"));
  }

  TEST_CASE("errors: files too short or truncated") {
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    write_bytes(path, "abcde");
    std::string msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "shorter than"));

    // Header length beyond the end of the file.
    write_bytes(path, std::string("\xe8\x03\0\0\0\0\0\0", 8) + "{\"a\":1}");
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "truncated"));
    CHECK(contains(msg, "1000"));

    // Absurd header length (1 TB).
    write_bytes(path, std::string("\0\0\0\0\0\1\0\0", 8) + "{}");
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "absurdly large"));

    // Data section cut short.
    llama2::write_safetensors(path, {{"a", DType::F32, {4}, {1, 2, 3, 4}},
                                     {"big.weight", DType::F32, {8}, small_ints(8)}});
    std::filesystem::resize_file(path, std::filesystem::file_size(path) - 4);
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "truncated: tensor 'big.weight' needs bytes up to 48"));
    CHECK(contains(msg, "has only 44 bytes"));
  }

  TEST_CASE("errors: malformed headers") {
    TempDir dir;
    const std::string path = dir.file("model.safetensors");
    auto open_msg = [&](const std::string& header, size_t data_size) {
      write_raw_safetensors(path, header, data_size);
      return error_of([&] { llama2::SafetensorsFile f(path); });
    };
    std::string msg = open_msg("{not json", 0);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "not valid JSON"));
    msg = open_msg("[1, 2]", 0);
    CHECK(contains(msg, "not a JSON object"));
    msg = open_msg(R"({"t": 5})", 0);
    CHECK(contains(msg, "'t'"));

    const std::string bad_offsets[] = {R"([8, 4])", R"(["0", 4])", R"([0])", R"([-4, 4])"};
    for (const std::string& offsets : bad_offsets) {
      CAPTURE(offsets);
      msg = open_msg(
          R"({"w.bad": {"dtype": "F32", "shape": [1], "data_offsets": )" + offsets + "}}", 8);
      CHECK(contains(msg, path));
      CHECK(contains(msg, "'w.bad'"));
      CHECK(contains(msg, "data_offsets"));
    }
    msg = open_msg(R"({"w.nodtype": {"shape": [1], "data_offsets": [0, 4]}})", 4);
    CHECK(contains(msg, "'w.nodtype'"));
    CHECK(contains(msg, "dtype"));
    msg = open_msg(R"({"w.shape": {"dtype": "F32", "shape": [-1, 2], "data_offsets": [0, 4]}})", 4);
    CHECK(contains(msg, "'w.shape'"));
    CHECK(contains(msg, "shape"));
    msg = open_msg(R"({"w.noshape": {"dtype": "F32", "data_offsets": [0, 4]}})", 4);
    CHECK(contains(msg, "'w.noshape'"));

    // Size mismatch: [2, 3] F32 needs 24 bytes, the offsets give 20.
    msg = open_msg(R"({"w.size": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})", 24);
    CHECK(contains(msg, path));
    CHECK(contains(msg, "'w.size'"));
    CHECK(contains(msg, "expected 24"));

    // __metadata__ is not a tensor; an empty header is a valid (empty) file.
    write_raw_safetensors(path, R"({"__metadata__": {"format": "pt"}})", 0);
    llama2::SafetensorsFile ok(path);
    CHECK(ok.names().empty());
    CHECK(ok.metadata().at("format") == "pt");
  }

  TEST_CASE("errors: unsupported dtype is reported when the tensor is read") {
    TempDir dir;
    write_raw_safetensors(
        dir.file("model.safetensors"),
        R"({"q.weight": {"dtype": "I8", "shape": [2, 2], "data_offsets": [0, 4]},)"
        R"( "f": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
        8);
    WeightStore ws = WeightStore::open(dir.path);
    const llama2::TensorInfo& t = ws.get("q.weight");
    CHECK(t.dtype == DType::Other);
    CHECK(t.dtype_name == "I8");
    float out[4];
    std::string msg = error_of([&] { ws.read_block_f32("q.weight", 0, 2, 0, 2, out); });
    CHECK(contains(msg, "tensor 'q.weight' in " + dir.file("model.safetensors")));
    CHECK(contains(msg, "has dtype I8; supported: F32, F16, BF16"));
    msg = error_of([&] { ws.read_block_raw("q.weight", 0, 1, 0, 1, out); });
    CHECK(contains(msg, "I8"));
    msg = error_of([&] { ws.read_vector_f32("q.weight", out); });
    CHECK(contains(msg, "I8"));
    ws.read_vector_f32("f", out);
    CHECK(out[0] == 0.0f);
  }

  TEST_CASE("errors: broken indexes") {
    TempDir dir;
    const std::string index = dir.file("model.safetensors.index.json");
    llama2::write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                              {{"embed", DType::F32, {1}, {1}}});

    write_bytes(index, "{oops");
    std::string msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, index));
    CHECK(contains(msg, "not valid JSON"));

    write_bytes(index, R"({"metadata": {}})");
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, index));
    CHECK(contains(msg, "weight_map"));

    llama2::write_safetensors_index(index,
                                    {{"embed", "model-00001-of-00002.safetensors"},
                                     {"head", "model-00002-of-00002.safetensors"}},
                                    8);
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, index));
    CHECK(contains(msg, "model-00002-of-00002.safetensors"));
    CHECK(contains(msg, "does not exist"));

    // The index names a tensor that its shard does not hold.
    llama2::write_safetensors_index(index,
                                    {{"embed", "model-00001-of-00002.safetensors"},
                                     {"head", "model-00001-of-00002.safetensors"}},
                                    8);
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, index));
    CHECK(contains(msg, "'head'"));
    CHECK(contains(msg, dir.file("model-00001-of-00002.safetensors")));

    // A shard that is itself broken is reported with its own name.
    write_bytes(dir.file("model-00001-of-00002.safetensors"), "xy");
    msg = error_of([&] { WeightStore::open(dir.path); });
    CHECK(contains(msg, "model-00001-of-00002.safetensors"));
  }

  TEST_CASE("errors: writer rejects bad tensors and unwritable paths") {
    TempDir dir;
    const std::string path = dir.file("out.safetensors");
    std::string msg = error_of([&] {
      llama2::write_safetensors(path, {{"w.count", DType::F32, {2, 2}, {1, 2, 3}}});
    });
    CHECK(contains(msg, path));
    CHECK(contains(msg, "'w.count'"));
    CHECK(contains(msg, "needs 4"));
    msg = error_of([&] {
      llama2::write_safetensors(path, {{"d", DType::F32, {1}, {1}}, {"d", DType::F32, {1}, {1}}});
    });
    CHECK(contains(msg, "duplicate"));
    msg = error_of([&] { llama2::write_safetensors(path, {{"o", DType::Other, {1}, {1}}}); });
    CHECK(contains(msg, "'o'"));
    CHECK_FALSE(std::filesystem::exists(path));
    const std::string nowhere = dir.file("no/such/dir/out.safetensors");
    msg = error_of([&] { llama2::write_safetensors(nowhere, {}); });
    CHECK(contains(msg, nowhere));
    msg = error_of([&] { llama2::write_safetensors_index(nowhere, {}, 0); });
    CHECK(contains(msg, nowhere));
  }
}
