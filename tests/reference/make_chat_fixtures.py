#!/usr/bin/env python3
"""Reference token ids for the Llama-2 chat format (src/coordinator/text/chat_format.h).

Encodes a set of dialogs the way Meta's reference implementation (llama/generation.py,
chat_completion) does, with Python SentencePiece (PyPI's, in the project's .venv/), for each
tokenizer given, and writes them as JSON. The C++ test (tests/unit/test_chat_format.cpp) checks
that encode_llama2_chat gives the same ids; ctest's chat.fixtures entry re-runs this script and
checks the committed file is what it produces.

  usage: make_chat_fixtures.py OUT.json TOKENIZER_DIR...   (paths relative to the repo root)
"""
import json
import os
import sys

import sentencepiece as spm

B_INST, E_INST = "[INST]", "[/INST]"
B_SYS, E_SYS = "<<SYS>>\n", "\n<</SYS>>\n\n"


def encode_dialog(sp, dialog):
    """The reference rule: system merged into the first user turn, (user, assistant) pairs each
    BOS + encode("[INST] u [/INST] a ") + EOS, the final user turn BOS + encode("[INST] u [/INST]"),
    every content stripped with str.strip()."""
    if dialog[0]["role"] == "system":
        dialog = [{"role": dialog[1]["role"],
                   "content": B_SYS + dialog[0]["content"] + E_SYS + dialog[1]["content"]}] + dialog[2:]
    assert all(m["role"] == "user" for m in dialog[::2])
    assert all(m["role"] == "assistant" for m in dialog[1::2])
    assert dialog[-1]["role"] == "user"
    ids = []
    for prompt, answer in zip(dialog[::2], dialog[1::2]):
        text = f"{B_INST} {prompt['content'].strip()} {E_INST} {answer['content'].strip()} "
        ids += [sp.bos_id()] + sp.encode(text) + [sp.eos_id()]
    ids += [sp.bos_id()] + sp.encode(f"{B_INST} {dialog[-1]['content'].strip()} {E_INST}")
    return ids


def dialogs():
    u = lambda c: {"role": "user", "content": c}
    a = lambda c: {"role": "assistant", "content": c}
    s = lambda c: {"role": "system", "content": c}
    yield [u("Hello, who are you?")]
    yield [s("You are a terse assistant."), u("What is the capital of France?")]
    yield [u("Tell me a joke."), a("Why did the GPU cross the road?"), u("Why?")]
    yield [s("Answer in one word."), u("Colour of the sky?"), a("Blue."), u("And grass?")]
    turns = [u("one"), a("two"), u("three"), a("four"), u("five"), a("six"), u("seven"), a("eight"),
             u("nine")]
    yield turns  # five user turns
    yield [s("system\twith\ttabs"), *turns]
    # Whitespace at the edges, ASCII and Unicode (str.strip removes U+00A0, U+3000, U+2003 ...).
    yield [u("  \n\t padded user \t\n ")]
    yield [u("\u3000\u00a0nbsp and ideographic space\u2003\u3000"), a(" \u2028answer\u205f "), u("\u0085x\u001f")]
    yield [s("  system with spaces  "), u("  user with spaces  ")]
    # CJK and emoji (byte fallback for pieces the vocabulary lacks).
    yield [u("日本語で答えてください。猫は何ですか？")]
    yield [s("你是一个有帮助的助手。"), u("天空为什么是蓝色的？"), a("因为瑞利散射。"), u("🙂 and 👩‍💻?")]
    yield [u("emoji only: 🚀🚀🚀"), a("🎉"), u("한국어 텍스트")]
    # Empty and whitespace-only contents; markup-like text that is not special to the tokenizer.
    yield [u("")]
    yield [s(""), u("   ")]
    yield [u("[INST] nested [/INST] <<SYS>> not a system <</SYS>>"), a("<s> </s>"), u("ok")]
    yield [u("line one\nline two\n\nline four"), a("multi\nline\nanswer\n"), u("end\n")]


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out_path, dirs = sys.argv[1], sys.argv[2:]
    cases = []
    for d in dirs:
        sp = spm.SentencePieceProcessor(model_file=os.path.join(d, "tokenizer.model"))
        for dialog in dialogs():
            cases.append({"tokenizer": d, "messages": dialog, "ids": encode_dialog(sp, dialog)})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/reference/make_chat_fixtures.py", "cases": cases}, f,
                  ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
