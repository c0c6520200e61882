// PyTorch checkpoint reading (rank/torch_file.h, torch_pickle.h, zip_archive.h): files written by
// torch.save itself (tests/reference/torch_files/, made by tests/reference/make_meta_fixtures.py
// with expected.json holding torch's own values) read back bit for bit; every refusal names the
// file and the tensor, record or opcode. A few defects torch cannot be made to write (a wrong
// storage size, a big-endian file, opcodes outside the subset) come from a hand-made archive.
#include <doctest/doctest.h>

#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "rank/torch_file.h"
#include "rank/torch_pickle.h"
#include "rank/weight_store.h"
#include "rank/zip_archive.h"
#include "test_util.h"

namespace {

using llama2::DType;
using llama2::TorchFile;
using llama2::WeightStore;
using llama2::test::contains;
using llama2::test::error_of;
using llama2::test::TempDir;
using nlohmann::json;

const std::string kDir = LLAMA2_SOURCE_DIR "/tests/reference/torch_files/";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A store over one torch file, its tensors under their own names.
WeightStore store_of(const std::string& path) {
  std::vector<std::unique_ptr<llama2::TensorFile>> files;
  files.push_back(std::make_unique<TorchFile>(path));
  std::map<std::string, llama2::StoredTensor> tensors;
  for (const std::string& n : files[0]->names()) tensors[n].pieces = {files[0]->find(n)};
  return WeightStore::from_pieces(kDir, {path}, std::move(files), std::move(tensors));
}

DType dtype_of_torch(const std::string& name) {
  if (name == "torch.float16") return DType::F16;
  if (name == "torch.bfloat16") return DType::BF16;
  if (name == "torch.float32") return DType::F32;
  return DType::Other;
}

// Every tensor expected.json lists for `file`: dtype, shape and torch's fp32 values, bit for bit.
void check_against_torch(const std::string& file) {
  const json expected = json::parse(read_all(kDir + "expected.json"))["files"][file];
  REQUIRE(expected.size() > 0);
  const WeightStore ws = store_of(kDir + file);
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    CAPTURE(file);
    CAPTURE(it.key());
    const llama2::TensorInfo& t = ws.get(it.key());
    CHECK(t.dtype == dtype_of_torch(it.value()["dtype"]));
    CHECK(t.shape == it.value()["shape"].get<std::vector<int64_t>>());
    const auto bits = it.value()["f32_bits"].get<std::vector<int32_t>>();
    REQUIRE(static_cast<int64_t>(bits.size()) == t.numel());
    std::vector<float> got(bits.size());
    ws.read_vector_f32(it.key(), got.data());
    int differ = 0;
    for (size_t i = 0; i < bits.size(); ++i) {
      int32_t b;
      std::memcpy(&b, &got[i], 4);
      differ += b != bits[i];
    }
    CHECK(differ == 0);
  }
}

// ---- a hand-made archive for the defects torch will not write ----

// Little-endian fields of the given byte widths.
void put(std::string* s, std::initializer_list<std::pair<uint64_t, int>> fields) {
  for (const auto& [v, bytes] : fields) {
    for (int i = 0; i < bytes; ++i) s->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
}

// A zip of stored records (no ZIP64, CRC left 0: the reader does not check it).
std::string make_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out, dir;
  for (const auto& [name, data] : records) {
    const uint64_t local = out.size(), n = data.size();
    put(&out, {{0x04034b50, 4}, {20, 2}, {0, 2}, {0, 2}, {0, 4}, {0, 4}, {n, 4}, {n, 4}});
    put(&out, {{name.size(), 2}, {0, 2}});
    out += name + data;
    put(&dir, {{0x02014b50, 4}, {20, 2}, {20, 2}, {0, 2}, {0, 2}, {0, 4}, {0, 4}, {n, 4}, {n, 4}});
    put(&dir, {{name.size(), 2}, {0, 2}, {0, 2}, {0, 2}, {0, 2}, {0, 4}, {local, 4}});
    dir += name;
  }
  const uint64_t dir_at = out.size(), count = records.size();
  out += dir;
  put(&out, {{0x06054b50, 4}, {0, 4}, {count, 2}, {count, 2}, {dir.size(), 4}, {dir_at, 4}});
  put(&out, {{0, 2}});
  return out;
}

std::string unicode(const std::string& s) {
  std::string out = "X";
  put(&out, {{s.size(), 4}});
  return out + s;
}

// The pickle torch.save writes for {name: tensor of `numel` floats, shape [numel]}, with
// `shape_int` as the pickled size (BININT1 by default).
std::string one_tensor_pickle(const std::string& name, int numel, const std::string& shape_int) {
  using namespace std::string_literals;  // the opcodes' arguments hold NUL bytes
  return "\x80\x02}q\x00"s + unicode(name) + "ctorch._utils\n_rebuild_tensor_v2\n(("s +
         unicode("storage") + "ctorch\nFloatStorage\n"s + unicode("0") + unicode("cpu") + "K"s +
         std::string(1, static_cast<char>(numel)) + "tQK\x00"s + shape_int + "\x85K\x01\x85\x89"s +
         "ccollections\nOrderedDict\n)RtRs."s;
}

std::string archive(const std::string& pickle, const std::string& storage,
                    const std::string& byteorder = "little") {
  return make_zip({{"a/data.pkl", pickle}, {"a/byteorder", byteorder}, {"a/data/0", storage}});
}

std::string floats(int n) {
  std::string s;
  for (int i = 0; i < n; ++i) {
    const float f = static_cast<float>(i) * 0.5f;
    s.append(reinterpret_cast<const char*>(&f), 4);
  }
  return s;
}

}  // namespace

TEST_SUITE("torch_file") {
  TEST_CASE("torch.save files read back as torch holds them") {
    // A module's state_dict (OrderedDict with _metadata, f16), views of one storage at offsets,
    // bf16, a scalar, a 3-D tensor, f16 specials (inf, -0, subnormal, 65504).
    check_against_torch("state_dict.pth");
    check_against_torch("plain_dict.pth");  // a plain dict, bf16 and f32
    // Python's zipfile with a ZIP64 extra field on every record.
    check_against_torch("zip64_entries.pth");
  }

  TEST_CASE("views of one storage point into the same record") {
    const TorchFile f(kDir + "state_dict.pth");
    const llama2::TensorInfo* whole = f.find("shared.whole");
    const llama2::TensorInfo* middle = f.find("shared.middle");
    REQUIRE(whole != nullptr);
    REQUIRE(middle != nullptr);
    CHECK(middle->begin == whole->begin + 4 * sizeof(float));  // storage offset 4
    CHECK(middle->end - middle->begin == 6 * sizeof(float));
    CHECK(f.metadata().empty());
  }

  TEST_CASE("a block read copies only the block's bytes") {
    const WeightStore ws = store_of(kDir + "plain_dict.pth");
    std::vector<float> out(100 * 2);
    ws.read_block_f32("b", 100, 200, 0, 2, out.data());  // "b" is ones(300, 2), f32
    CHECK(ws.bytes_copied() == 100 * 2 * 4);
    for (float v : out) CHECK(v == 1.0f);
  }

  TEST_CASE("other storage types parse and are refused when read") {
    const WeightStore ws = store_of(kDir + "int64.pth");
    CHECK(ws.get("ids").dtype == DType::Other);
    CHECK(ws.get("ids").dtype_name == "torch.LongStorage");
    std::vector<float> out(4);
    const std::string msg = error_of([&] { ws.read_vector_f32("ids", out.data()); });
    CHECK(contains(msg, "'ids'"));
    CHECK(contains(msg, kDir + "int64.pth"));
    CHECK(contains(msg, "torch.LongStorage"));
    ws.read_vector_f32("w", out.data());  // the float tensor beside it reads
    CHECK(out[0] == 1.0f);
  }

  TEST_CASE("refusals name the file and what was refused") {
    const struct {
      const char* file;
      std::vector<std::string> parts;
    } cases[] = {
        {"noncontiguous.pth", {"tensor 't'", "non-contiguous", "stride [1, 3]"}},
        {"parameter.pth", {"torch._utils._rebuild_parameter", "is not allowed"}},
        {"nested.pth", {"entry 'model' is a dict, not a tensor"}},
        {"list_value.pth", {"EMPTY_LIST", "outside the subset"}},
        {"protocol4.pth", {"pickle protocol 4"}},
        {"legacy.pth", {"not a zip archive", "legacy"}},
        {"compressed.pth", {"is compressed"}},
    };
    for (const auto& c : cases) {
      CAPTURE(c.file);
      const std::string msg = error_of([&] { TorchFile f(kDir + c.file); });
      CAPTURE(msg);
      CHECK(contains(msg, kDir + c.file));
      for (const std::string& part : c.parts) CHECK(contains(msg, part));
    }
  }

  TEST_CASE("a truncated file is refused naming it") {
    TempDir dir;
    const std::string bytes = read_all(kDir + "state_dict.pth");
    for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{10}}) {
      CAPTURE(keep);
      dir.write("cut.pth", bytes.substr(0, keep));
      const std::string msg = error_of([&] { TorchFile f(dir.file("cut.pth")); });
      CHECK(contains(msg, dir.file("cut.pth")));
      CHECK(contains(msg, "truncated"));
    }
  }

  TEST_CASE("the hand-made archive reads, and its defects are refused") {
    TempDir dir;
    const std::string ok_pickle = one_tensor_pickle("w", 6, "K\x06");
    dir.write("ok.pth", archive(ok_pickle, floats(6)));
    std::vector<float> out(6);
    store_of(dir.file("ok.pth")).read_vector_f32("w", out.data());
    CHECK(out[5] == 2.5f);

    auto refusal = [&](const std::string& bytes) {
      dir.write("bad.pth", bytes);
      return error_of([&] { TorchFile f(dir.file("bad.pth")); });
    };
    std::string msg = refusal(archive(ok_pickle, floats(5)));
    CHECK(contains(msg, "tensor 'w'"));
    CHECK(contains(msg, "holds 20 bytes, but the pickle says 6 elements"));
    msg = refusal(archive(ok_pickle, floats(6), "bigend"));
    CHECK(contains(msg, "byteorder record says 'bigend'"));
    msg = refusal(make_zip({{"a/data.pkl", ok_pickle}}));
    CHECK(contains(msg, "zip record 'a/data/0' (the storage of 'w') is missing"));
    // A shape larger than the storage; then LONG1 (8 bytes, 2^32) as a dimension.
    msg = refusal(archive(one_tensor_pickle("w", 6, "K\x07"), floats(6)));
    CHECK(contains(msg, "run past its storage of 6 elements"));
    msg = refusal(archive(
        one_tensor_pickle("w", 6, std::string("\x8a\x08\x00\x00\x00\x00\x01\x00\x00\x00", 10)),
        floats(6)));
    CHECK(contains(msg, "[4294967296]"));
    // An opcode outside the subset (BINFLOAT) where the shape should be, with its byte offset.
    msg = refusal(archive(one_tensor_pickle("w", 6, "G"), floats(6)));
    CHECK(contains(msg, "BINFLOAT (0x47)"));
    CHECK(contains(msg, "a/data.pkl: byte "));
    msg = refusal(archive(ok_pickle.substr(0, ok_pickle.size() - 5), floats(6)));
    CHECK(contains(msg, "truncated pickle"));
    msg = refusal(archive(std::string("\x80\x02s."), floats(6)));
    CHECK(contains(msg, "pickle stack underflow"));
    msg = refusal(archive(ok_pickle.substr(0, ok_pickle.size() - 3) + "s.", floats(6)));
    CHECK(contains(msg, "SETITEM(S) on something not a dict"));
  }

  TEST_CASE("the pickle machine's integers") {
    // {"w": tensor} with the storage's numel as BININT (J, signed 32-bit) and LONG1 of 1 byte
    // holding -1 (refused as a negative numel), straight through parse_state_dict_pickle.
    std::string p = one_tensor_pickle("w", 6, "K\x06");
    const auto t =
        llama2::parse_state_dict_pickle(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "x");
    REQUIRE(t.size() == 1);
    CHECK(t[0].name == "w");
    CHECK(t[0].storage_type == "FloatStorage");
    CHECK(t[0].shape == std::vector<int64_t>{6});
    CHECK(t[0].stride == std::vector<int64_t>{1});
    const size_t at = p.find(unicode("cpu")) + unicode("cpu").size();
    p.replace(at, 2, std::string("\x8a\x01\xff", 3));
    const std::string msg = error_of([&] {
      llama2::parse_state_dict_pickle(reinterpret_cast<const uint8_t*>(p.data()), p.size(), "x");
    });
    CHECK(
        contains(msg, "persistent id is not ('storage', torch.<T>Storage, key, location, numel)"));
  }
}
