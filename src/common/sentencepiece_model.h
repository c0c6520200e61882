// What the model side needs from a SentencePiece tokenizer.model without the tokenizer library:
// how many pieces it has (Meta's params.json says vocab_size -1 and leaves the count to the
// tokenizer) and its BOS/EOS ids. A shared value type: the planner and every rank read it from the
// file, while only rank 0's coordinator runs the tokenizer itself.
//
// The file is a serialized protobuf ModelProto: field 1 is the repeated pieces, field 2 the
// TrainerSpec, whose fields 41 and 42 are bos_id and eos_id (defaults 1 and 2).
#pragma once

#include <string>

namespace llama2 {

struct SentencePieceInfo {
  int pieces = 0;
  int bos_id = 1;
  int eos_id = 2;
};

// Error naming `path` when it cannot be read or is not a SentencePiece model.
SentencePieceInfo read_sentencepiece_info(const std::string& path);
// The same from the file's bytes; `source` names it in errors.
SentencePieceInfo parse_sentencepiece_info(const std::string& bytes, const std::string& source);

}  // namespace llama2
