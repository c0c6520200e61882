#!/usr/bin/env bash
# Meta's folder format and PyTorch .bin repositories (issue 37): tiny-bf16 written by torch.save
# as Meta's consolidated.NN.pth at model-parallel degree 1 and 2, and as pytorch_model.bin (single
# and sharded) (tests/reference/make_meta_fixtures.py). Generation from each folder equals
# generation from the Hugging Face safetensors folder token for token at 1, 2 and 4 ranks
# (greedy, and seeded sampling at 2), the logits are equal exactly, the start-up report says
# which files each rank read, and bad files stop every rank with one message. About 25 s.
#   usage: meta_checkpoint.sh LLAMA2 MODELS LLAMA2_LOGITS_DIFF
source "$(dirname "$0")/lib.sh" "$@"
DIFF=$3
PROMPT="The quick brown fox, 北京 and a 🦊."

ids() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_ids"])' "$TMP/$1.out"; }
gen() {  # gen NAME NP MODEL FLAGS...
  local name=$1 np=$2 model=$3; shift 3
  run_capture "$name" "$np" generate --model "$MODELS/$model" --json --prompt "$PROMPT" -n 24 \
    --ignore-eos "$@"
  [[ $(rc_of "$name") -eq 0 ]] || { fail "$name exited $(rc_of "$name")"; sed 's/^/    /' "$TMP/$name.err"; }
}

for np in 1 2 4; do
  gen "hf.np$np" $np tiny-bf16 --temperature 0
  want=$(ids "hf.np$np")
  for model in tiny-bf16-meta-mp1 tiny-bf16-meta-mp2 tiny-bf16-bin tiny-bf16-bin-sharded; do
    gen "$model.np$np" $np $model --temperature 0
    got=$(ids "$model.np$np")
    if [[ -n $want && $got == "$want" ]]; then pass "$model np=$np greedy == safetensors: $got"
    else fail "$model np=$np greedy $got != safetensors $want"; fi
  done
done
sampled=(--temperature 0.8 --top-k 40 --top-p 0.95 --repetition-penalty 1.1 --seed 7)
gen hf.sampled 2 tiny-bf16 "${sampled[@]}"
gen meta.sampled 2 tiny-bf16-meta-mp2 "${sampled[@]}"
if [[ $(ids meta.sampled) == "$(ids hf.sampled)" ]]; then pass "MP=2 sampled == safetensors: $(ids hf.sampled)"
else fail "MP=2 sampled $(ids meta.sampled) != safetensors $(ids hf.sampled)"; fi

# At 2 ranks on MP=2 files each rank reads its own file and its embedding rows' columns from the
# other: 256 rows x 32 columns x 2 bytes = 16384 B.
for r in 0 1; do
  own=consolidated.0$r.pth other=consolidated.0$((1 - r)).pth
  line=$(grep -m1 "^rank $r/2:" "$TMP/tiny-bf16-meta-mp2.np2.err")
  if grep -Eq "from 2 of 2 files \[.*$own [0-9]+ B.*$other 16384 B|$other 16384 B.*$own [0-9]+ B" <<<"$line"; then
    pass "rank $r/2 read its own file and 16384 B of embedding from $other: ${line#*copied }"
  else fail "rank $r/2's report: $line"; fi
done

# Logits equal exactly (the same bf16 values in another layout and file format).
for model in tiny-bf16-meta-mp2 tiny-bf16-bin-sharded; do
  "$MPIRUN" 2 "$DIFF" --model "$MODELS/$model" --against "$MODELS/tiny-bf16" --tolerance 0 \
    >"$TMP/diff.$model.out" 2>&1
  result=$(grep -m1 '^RESULT' "$TMP/diff.$model.out")
  if [[ $result == *status=PASS* ]]; then pass "$model logits: $result"
  else fail "$model logits: $result"; sed 's/^/    /' "$TMP/diff.$model.out"; fi
done

# Bad files: one message naming the file, every rank exits (no hang).
try() {  # try NAME PATTERN
  run_capture "$1" 2 generate --model "$TMP/$1" --prompt "hello" -n 2
  expect_failure "$1" "$2"
}
cp -r "$MODELS/tiny-bf16-meta-mp2" "$TMP/truncated"
head -c 100000 "$MODELS/tiny-bf16-meta-mp2/consolidated.01.pth" >"$TMP/truncated/consolidated.01.pth"
try truncated "truncated/consolidated.01.pth: not a zip archive"
cp -r "$MODELS/tiny-bf16-bin" "$TMP/pickle"
cp "$(dirname "$0")/../reference/torch_files/parameter.pth" "$TMP/pickle/pytorch_model.bin"
try pickle "global 'torch._utils._rebuild_parameter' is not allowed"
cp -r "$MODELS/tiny-bf16-meta-mp2" "$TMP/missing"
rm "$TMP/missing/consolidated.00.pth"
try missing "found consolidated.01.pth where consolidated.00.pth should be"
finish
