// Tokenizer tests on a vocabulary trained here from data/corpus.txt (once per test binary).
#include <doctest/doctest.h>
#include <stdlib.h>  // mkdtemp

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "common/check.h"
#include "coordinator/text/tokenizer.h"
#include "tools/train_tokenizer.h"

namespace {

using llama2::StreamingDetokenizer;
using llama2::Tokenizer;

const char* const kCorpus = LLAMA2_SOURCE_DIR "/data/corpus.txt";
constexpr int kVocab = 512;

// A temporary directory removed when the test binary exits.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    const auto base = std::filesystem::temp_directory_path() / "llama2_tok_XXXXXX";
    std::string tmpl = base.string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

TempDir& scratch() {
  static TempDir dir;
  return dir;
}

// Trained once: SentencePiece training is the slow part of this suite.
const std::string& model_path() {
  static const std::string path = [] {
    const std::string prefix = (scratch().path / "tiny").string();
    llama2::train_tokenizer(kCorpus, prefix, kVocab);
    return prefix + ".model";
  }();
  return path;
}

const Tokenizer& tok() {
  static const Tokenizer t(model_path());
  return t;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const llama2::Error& e) {
    return e.what();
  }
  return "<no llama2::Error thrown>";
}

const std::vector<std::string> kSamples = {
    "The quick brown fox jumps over the lazy dog.",
    "Crème brûlée, façade, naïve: déjà vu à São Paulo, Kraków und Zürich.",
    "¿Dónde está la estación? Żółw, gęś, łódź. Đà Nẵng, tiếng Việt.",
    "今天天气很好，我们去公园散步吧。",
    "鬱蒼とした森。東京タワー",
    "Emoji 🚀🎉🙂 and a family 👨‍👩‍👧 and a flag 🇯🇵!",
    "Mixed: 你好 world, Привет мир, Καλημέρα, 12345 + 678 = 13023 ✅",
    " leading space",
    "   three leading spaces",
    "two  inner   gaps",
    "trailing spaces   ",
    " ",
    "  ",
    "\n newline then space\n\n",
    "tab\tand\r\ncrlf",
    "",
};

// Streams `ids` through a fresh detokenizer and checks the contract on every returned chunk.
void check_streaming(const std::vector<int>& ids) {
  StreamingDetokenizer stream(tok());
  std::string joined;
  for (int id : ids) {
    const std::string piece = stream.push(id);
    CHECK(llama2::is_valid_utf8(piece));
    joined += piece;
  }
  const std::string rest = stream.finish();
  CHECK(llama2::is_valid_utf8(rest));
  joined += rest;
  CHECK(joined == tok().decode(ids));
}

}  // namespace

TEST_SUITE("tokenizer") {
  TEST_CASE("llama id layout: <unk> <s> </s> then the 256 byte pieces") {
    const Tokenizer& t = tok();
    CHECK(t.vocab_size() == kVocab);
    CHECK(t.id_to_piece(0) == "<unk>");
    CHECK(t.id_to_piece(1) == "<s>");
    CHECK(t.id_to_piece(2) == "</s>");
    CHECK(t.bos_id() == 1);
    CHECK(t.eos_id() == 2);
    for (int b = 0; b < 256; ++b) {
      char want[8];
      std::snprintf(want, sizeof want, "<0x%02X>", b);
      CHECK(t.id_to_piece(3 + b) == want);
      CHECK(t.is_byte(3 + b));
      CHECK(t.byte_value(3 + b) == b);
    }
    CHECK_FALSE(t.is_byte(259));
    CHECK(t.is_control(1));
    CHECK(t.is_control(2));
    CHECK_FALSE(t.is_control(0));
  }

  TEST_CASE("encode adds <s> only when asked") {
    const auto plain = tok().encode("Hello there", false);
    const auto with_bos = tok().encode("Hello there", true);
    REQUIRE(!plain.empty());
    CHECK(plain.front() != tok().bos_id());
    REQUIRE(with_bos.size() == plain.size() + 1);
    CHECK(with_bos.front() == tok().bos_id());
    CHECK(std::vector<int>(with_bos.begin() + 1, with_bos.end()) == plain);
    CHECK(tok().encode("", false).empty());
    CHECK(tok().encode("", true) == std::vector<int>{tok().bos_id()});
  }

  TEST_CASE("decode(encode(x)) == x, with and without <s>") {
    for (const auto& s : kSamples) {
      CAPTURE(s);
      CHECK(tok().decode(tok().encode(s, false)) == s);
      CHECK(tok().decode(tok().encode(s, true)) == s);
    }
  }

  TEST_CASE("decode drops the dummy-prefix space of the first non-control piece only") {
    const Tokenizer& t = tok();
    const auto the = t.encode("the", false);  // "▁the" with the dummy prefix
    REQUIRE(the.size() == 1);
    CHECK(t.id_to_piece(the[0]) == "\xE2\x96\x81the");
    const int space = t.encode(" the", false).front();  // a lone "▁" piece
    REQUIRE(t.id_to_piece(space) == "\xE2\x96\x81");
    CHECK(t.decode({the[0]}) == "the");
    CHECK(t.decode({the[0], the[0]}) == "the the");
    CHECK(t.decode({t.bos_id(), the[0]}) == "the");  // control pieces do not count
    CHECK(t.decode({t.eos_id(), t.bos_id(), the[0]}) == "the");
    CHECK(t.decode({space, the[0]}) == " the");     // only the first "▁" goes
    CHECK(t.decode({3 + 'A', the[0]}) == "A the");  // a byte piece counts as the first piece
    CHECK(t.decode({t.eos_id()}).empty());
  }

  TEST_CASE("common words are pieces; emoji and rare CJK use byte fallback") {
    const Tokenizer& t = tok();
    CHECK(t.encode("the", false).size() == 1);
    auto count_bytes = [&](const std::vector<int>& ids) {
      int n = 0;
      for (int id : ids) n += t.is_byte(id) ? 1 : 0;
      return n;
    };
    // Each emoji is rare in the corpus, so all of its UTF-8 bytes are byte pieces.
    for (const char* e : {"🚀", "🎉", "🙂", "🍕"}) {
      CAPTURE(e);
      const auto ids = t.encode(e, false);
      CHECK(count_bytes(ids) == 4);
    }
    const auto zh = t.encode("鬱蒼とした森で中文を書く", false);
    CHECK(count_bytes(zh) >= 9);  // at least three CJK characters fell back to bytes

    // The corpus line by line, as it was trained (a newline is never seen in training, so it
    // would be a byte piece): byte pieces are a minority but present (measured 8.7%).
    std::ifstream corpus(kCorpus);
    std::string line;
    int tokens = 0, bytes = 0;
    while (std::getline(corpus, line)) {
      const auto ids = t.encode(line, false);
      tokens += static_cast<int>(ids.size());
      bytes += count_bytes(ids);
    }
    MESSAGE("byte pieces: " << bytes << " of " << tokens << " corpus tokens");
    CHECK(bytes > tokens / 50);
    CHECK(bytes < tokens / 4);
  }

  TEST_CASE("training is deterministic and independent of the output path") {
    TempDir a, b;
    llama2::train_tokenizer(kCorpus, (a.path / "m").string(), kVocab);
    llama2::train_tokenizer(kCorpus, (b.path / "other").string(), kVocab);
    const std::string first = read_file((a.path / "m.model").string());
    CHECK(first.size() > 1000);
    CHECK(first == read_file((b.path / "other.model").string()));
    CHECK(first == read_file(model_path()));
    CHECK_FALSE(std::filesystem::exists(a.path / "m.vocab"));
  }

  TEST_CASE("training errors name the corpus or the minimum vocabulary") {
    TempDir d;
    const std::string prefix = (d.path / "m").string();
    const std::string missing = (d.path / "no_such_corpus.txt").string();
    CHECK(error_of([&] { llama2::train_tokenizer(missing, prefix, kVocab); }).find(missing) !=
          std::string::npos);
    const std::string small = error_of([&] { llama2::train_tokenizer(kCorpus, prefix, 100); });
    CHECK(small.find("100") != std::string::npos);
    CHECK(small.find(std::to_string(llama2::kMinTokenizerVocab)) != std::string::npos);
    // Above the byte-fallback minimum but too small for the characters the corpus needs.
    const std::string chars = error_of([&] { llama2::train_tokenizer(kCorpus, prefix, 300); });
    CHECK(chars.find(kCorpus) != std::string::npos);
    CHECK(chars.find("required_chars") != std::string::npos);
    CHECK_FALSE(std::filesystem::exists(prefix + ".model"));
  }

  TEST_CASE("bad ids and bad model files are errors that name them") {
    const Tokenizer& t = tok();
    const std::string big = error_of([&] { t.decode({5, kVocab}); });
    CHECK(big.find("512") != std::string::npos);
    CHECK(big.find("[0, 512)") != std::string::npos);
    CHECK(error_of([&] { t.decode({-1}); }).find("-1") != std::string::npos);
    CHECK(error_of([&] { t.id_to_piece(99999); }).find("99999") != std::string::npos);
    StreamingDetokenizer stream(t);
    CHECK(error_of([&] { stream.push(kVocab + 7); }).find("519") != std::string::npos);

    const std::string missing = (scratch().path / "absent.model").string();
    CHECK(error_of([&] { Tokenizer x(missing); }).find(missing) != std::string::npos);
    CHECK(error_of([&] { Tokenizer x(kCorpus); }).find(kCorpus) != std::string::npos);
  }

  TEST_CASE("is_valid_utf8 follows the well-formed UTF-8 table") {
    CHECK(llama2::is_valid_utf8(""));
    CHECK(llama2::is_valid_utf8("plain ascii"));
    CHECK(llama2::is_valid_utf8("é 中 🚀 \xEF\xBF\xBD"));
    CHECK_FALSE(llama2::is_valid_utf8("\xE4\xB8"));          // truncated
    CHECK_FALSE(llama2::is_valid_utf8("\x80"));              // lone continuation
    CHECK_FALSE(llama2::is_valid_utf8("\xC0\x80"));          // overlong
    CHECK_FALSE(llama2::is_valid_utf8("\xE0\x9F\xBF"));      // overlong
    CHECK_FALSE(llama2::is_valid_utf8("\xED\xA0\x80"));      // surrogate
    CHECK_FALSE(llama2::is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
    CHECK_FALSE(llama2::is_valid_utf8("\xF5\x80\x80\x80"));
  }

  TEST_CASE("streaming detokenizer on encoded text") {
    for (const auto& s : kSamples) {
      CAPTURE(s);
      auto ids = tok().encode(s, true);
      check_streaming(ids);
      ids.push_back(tok().eos_id());
      check_streaming(ids);
      check_streaming(tok().encode(s, false));
    }
    // Everything at once, with control pieces between the sentences.
    std::vector<int> all;
    for (const auto& s : kSamples) {
      const auto ids = tok().encode(s, true);
      all.insert(all.end(), ids.begin(), ids.end());
      all.push_back(tok().eos_id());
    }
    check_streaming(all);
  }

  TEST_CASE("continuation(id): the anchored decode without the anchor, the same from the cache") {
    const std::string anchor = tok().decode({tok().unk_id()});
    for (int id = 3 + 256; id < tok().vocab_size(); id += 7) {
      CAPTURE(id);
      const std::string want = tok().decode({tok().unk_id(), id}).substr(anchor.size());
      CHECK(tok().continuation(id) == want);
      CHECK(tok().continuation(id) == want);  // second call: cached
    }
    CHECK(tok().continuation(tok().vocab_size() - 1).find("\xe2\x96\x81") == std::string::npos);
    CHECK_THROWS_AS(tok().continuation(tok().vocab_size()), llama2::Error);
  }

  TEST_CASE("streaming detokenizer holds back split characters") {
    const Tokenizer& t = tok();
    StreamingDetokenizer stream(t);
    CHECK(stream.push(3 + 0xF0).empty());
    CHECK(stream.push(3 + 0x9F).empty());
    CHECK(stream.push(3 + 0x9A).empty());
    CHECK(stream.push(3 + 0x80) == "🚀");
    // A lead byte followed by a normal piece can no longer complete: U+FFFD, as decode gives.
    CHECK(stream.push(3 + 0xE4).empty());
    const auto the = t.encode("the", false);
    CHECK(stream.push(the[0]) == "\xEF\xBF\xBD the");
    CHECK(stream.push(3 + 0xE4).empty());
    CHECK(stream.finish() == "\xEF\xBF\xBD");
    // finish() starts a new sequence: the next first piece loses its dummy-prefix space again.
    CHECK(stream.push(the[0]) == "the");
  }

  TEST_CASE("streaming detokenizer on random ids biased toward byte pieces") {
    std::mt19937 rng(12345);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto byte_id = [](int b) { return 3 + b; };
    auto random_id = [&]() {
      const int r = pick(0, 99);
      if (r < 25) return byte_id(pick(0xC0, 0xFF));  // lead bytes, valid or not
      if (r < 55) return byte_id(pick(0x80, 0xBF));  // continuation bytes
      if (r < 65) return byte_id(pick(0x00, 0x7F));  // ASCII bytes
      if (r < 72) return pick(1, 2);                 // <s>, </s>
      if (r < 75) return 0;                          // <unk>
      return pick(259, kVocab - 1);                  // learned pieces, many with a leading "▁"
    };
    for (int n = 0; n < 2500; ++n) {
      std::vector<int> ids(static_cast<size_t>(pick(1, 24)));
      for (int& id : ids) id = random_id();
      if (n % 4 == 0) {
        // Splice in a well-formed multi-byte character, sometimes cut short.
        const std::string ch = n % 8 == 0 ? "🎉" : "鬱";
        const size_t keep = ch.size() - static_cast<size_t>(pick(0, 1));
        const size_t at = static_cast<size_t>(pick(0, static_cast<int>(ids.size())));
        std::vector<int> bytes;
        for (size_t i = 0; i < keep; ++i)
          bytes.push_back(byte_id(static_cast<unsigned char>(ch[i])));
        ids.insert(ids.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
      }
      CAPTURE(n);
      check_streaming(ids);
    }
  }
}
