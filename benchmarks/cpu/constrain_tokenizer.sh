#!/usr/bin/env bash
# Trains the 32,000-piece SentencePiece vocabulary that the constraint benchmark
# (bench_constrain.cpp) and the cross-check (tests/reference/constrain_crosscheck.py) mask over:
# `llama2 train-tokenizer` (Llama conventions: byte fallback, split digits) on a corpus made of the
# project's texts (data/corpus.txt, docs/, src/), Debian's word list (wamerican) and generated JSON
# lines, so that the vocabulary has the JSON punctuation pieces (`":`, `"}`, `▁{`) a real one has.
# Deterministic: the same inputs give the same file.
#   usage: benchmarks/cpu/constrain_tokenizer.sh [OUT_DIR]   (default build/constrain)
#   needs: build/llama2 (cmake --build build --target llama2), python3
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=${1:-$root/build/constrain}
llama2=${LLAMA2_BIN:-$root/build/llama2}
mkdir -p "$out"
corpus=$out/corpus.txt
{
  cat "$root/data/corpus.txt"
  cat "$root"/docs/*.md
  find "$root/src" -name '*.cpp' -o -name '*.h' | sort | xargs cat
  if [[ -f /usr/share/dict/american-english ]]; then cat /usr/share/dict/american-english; fi
  python3 - <<'PY'
import json, random
random.seed(36)
words = ["name", "id", "type", "value", "items", "price", "city", "user", "email", "status",
         "created_at", "description", "count", "tags", "enabled", "score", "unit", "address"]
for i in range(40000):
    doc = {random.choice(words): random.choice([random.randint(-999, 99999), random.random() * 100,
                                                "".join(random.choice("abcdefghij klm") for _ in range(random.randint(1, 12))),
                                                True, False, None, [1, 2, 3], {"k": "v"}])
           for _ in range(random.randint(1, 5))}
    print(json.dumps(doc, indent=None if i % 3 else 2, separators=None if i % 2 else (",", ":")))
PY
} > "$corpus"
"$llama2" train-tokenizer --corpus "$corpus" --out "$out/tokenizer-32k.model" --vocab 32000 \
  --character-coverage 0.9995
echo "constrain_tokenizer.sh: $out/tokenizer-32k.model"
