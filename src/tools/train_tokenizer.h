// Trains a small SentencePiece BPE tokenizer with the LLaMA-2 conventions, so that tests and tiny
// models can use a tokenizer the project builds itself (data/corpus.txt), not a downloaded one.
#pragma once

#include <string>

namespace llama2 {

// The smallest vocabulary byte fallback allows: <unk>, <s>, </s>, the 256 byte pieces and at least
// one learned piece. A real corpus needs more: every character kept by the character coverage is a
// piece too, and SentencePiece reports that count when the vocabulary cannot hold them.
constexpr int kMinTokenizerVocab = 3 + 256 + 1;

// Trains on `corpus_path` (UTF-8 text, one sentence per line) and writes `<model_prefix>.model`
// (no .vocab file). Ids: 0 <unk>, 1 <s>, 2 </s>, 3..258 the bytes <0x00>..<0xFF>, no pad.
// `character_coverage` (in (0, 1]) is the share of the corpus's characters that become pieces of
// their own; the rest fall back to bytes. 0.98 suits data/corpus.txt with a 512 vocabulary (see
// the .cpp); an English corpus with a few thousand pieces keeps 0.9995 as Llama's tokenizer did.
// Deterministic: the same corpus and options give a byte-identical file wherever it is written.
// Throws llama2::Error naming the corpus or the output path on failure.
void train_tokenizer(const std::string& corpus_path, const std::string& model_prefix,
                     int vocab_size, double character_coverage = 0.98);

}  // namespace llama2
