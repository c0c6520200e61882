// How many tokens a text prompt has at least, from its byte length alone: the socket thread
// refuses a prompt that cannot fit without tokenizing it (SentencePiece needs about 1.5 s for a
// 1 MB prompt, during which the prompt would hold a thread).
//
// Why the bound is sound. SentencePiece first normalizes the text, then splits the normalized text
// into pieces of the vocabulary. When the normalizer has no character map (the "identity" rule
// of LLaMA-2's tokenizer and of the project's test tokenizers) and does not remove extra
// whitespace, every input byte survives normalization (the one rewrite, ' ' -> "▁", grows the
// text). With byte fallback every token is a vocabulary piece or a single byte: a character
// outside the vocabulary becomes its bytes, never one <unk> covering a whole run. So a token
// covers at most P normalized bytes, P being the longest piece, and a prompt of B bytes has at
// least ceil(B / P) tokens, plus <s>. For any other tokenizer there is no such bound (NFKC maps
// 4-byte characters to 1 byte, whitespace folding removes any number of bytes, <unk> can cover a
// whole run), so none is used: its prompts are always tokenized before the length check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace llama2 {

class Tokenizer;

// The P above for the SentencePiece model file `model_path` (the file `tok` was loaded from),
// or 0 when the model's settings give no sound bound (or the file cannot be read).
int max_piece_bytes_for_bound(const std::string& model_path, const Tokenizer& tok);

// The least number of tokens (<s> included) a text prompt of `text_bytes` bytes can have; 1 when
// `max_piece_bytes` is 0 (no bound known).
int64_t min_prompt_tokens(size_t text_bytes, int max_piece_bytes);

}  // namespace llama2
