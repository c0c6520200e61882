#include "tools/train_tokenizer.h"

#include <sentencepiece_trainer.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unordered_map>

#include "common/check.h"

namespace llama2 {

void train_tokenizer(const std::string& corpus_path, const std::string& model_prefix,
                     int vocab_size, double character_coverage) {
  if (!(character_coverage > 0.0 && character_coverage <= 1.0)) {
    throw Error("tokenizer character_coverage must be in (0, 1] (got " +
                std::to_string(character_coverage) + ")");
  }
  if (vocab_size < kMinTokenizerVocab) {
    throw Error("tokenizer vocab_size " + std::to_string(vocab_size) +
                " is too small: byte fallback takes 259 ids (<unk>, <s>, </s>, 256 bytes), so "
                "the minimum is " +
                std::to_string(kMinTokenizerVocab));
  }
  if (model_prefix.empty()) throw Error("tokenizer model prefix is empty");
  {
    std::ifstream probe(corpus_path, std::ios::binary);
    if (!probe) throw Error("tokenizer corpus '" + corpus_path + "' cannot be opened");
    if (probe.peek() == std::ifstream::traits_type::eof()) {
      throw Error("tokenizer corpus '" + corpus_path + "' is empty");
    }
  }

  const std::unordered_map<std::string, std::string> args = {
      {"input", corpus_path},
      {"vocab_size", std::to_string(vocab_size)},
      {"model_type", "bpe"},
      // LLaMA's id layout; pad stays undefined as in the released tokenizer.
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"unk_piece", "<unk>"},
      {"bos_piece", "<s>"},
      {"eos_piece", "</s>"},
      // Any byte string stays encodable: characters outside the vocabulary become <0xNN> pieces.
      {"byte_fallback", "true"},
      // Text must survive a round trip unchanged, so no NFKC and no whitespace folding.
      {"normalization_rule_name", "identity"},
      {"add_dummy_prefix", "true"},
      {"remove_extra_whitespaces", "false"},
      {"split_digits", "true"},
      {"allow_whitespace_only_pieces", "true"},
      // Measured on data/corpus.txt: 0.995 keeps 354 distinct characters (CJK singletons
      // included), more than a 512 vocabulary can hold after the 259 fixed ids; 0.98 keeps ~125,
      // leaving room for ~130 merges, and the rare tail (most CJK, all emoji) falls back to bytes.
      {"character_coverage", std::to_string(character_coverage)},
      // Determinism: one thread, every sentence read in file order (no sampling, no shuffle).
      {"num_threads", "1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      // The trainer logs a page per run to stderr; the CLI should only print errors.
      {"minloglevel", "2"},
  };

  // Training into a string instead of letting SentencePiece write <prefix>.model keeps the output
  // path out of the stored TrainerSpec (so the bytes do not depend on where they are written),
  // writes no .vocab file, and never leaves a half-written .model behind.
  std::string model;
  const auto status = sentencepiece::SentencePieceTrainer::Train(args, nullptr, &model);
  if (!status.ok()) {
    throw Error("training a tokenizer on '" + corpus_path + "' with vocab_size " +
                std::to_string(vocab_size) + " failed: " + status.ToString());
  }

  const std::string path = model_prefix + ".model";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw Error("cannot write tokenizer model '" + tmp + "'");
    out.write(model.data(), static_cast<std::streamsize>(model.size()));
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw Error("writing tokenizer model '" + tmp + "' failed");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw Error("cannot move tokenizer model into place at '" + path + "'");
  }
}

}  // namespace llama2
