#!/usr/bin/env bash
# `messages` end to end: a real 2-rank `serve` and a `batch` job get chat dialogs, and their greedy
# output must equal that of the same request given as `prompt_tokens` computed by Python
# SentencePiece under Meta's rule (tests/reference/make_chat_fixtures.py's encode_dialog), so the
# server encodes exactly the reference's ids. Also: a dialog breaking the order rule gets
# invalid_request naming the rule, and the server goes on.
#   usage: chat_serve.sh LLAMA2 MODELS        (needs the project's .venv/ with sentencepiece)
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# shellcheck source=tests/test_python.sh
source "$(dirname "${BASH_SOURCE[0]}")/../test_python.sh"
test_python chat.serve sentencepiece
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
M=$MODELS/tiny-gqa
SOCK=$TMP/chat.sock
"$MPIRUN" 2 "$LLAMA2" serve --model "$M" --socket "$SOCK" --quiet >"$TMP/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do [[ -S "$SOCK" ]] && break; sleep 0.1; done
[[ -S "$SOCK" ]] || { fail "server did not start"; cat "$TMP/serve.log"; exit 1; }
"$PY" - "$SOCK" "$M" "$ROOT" >"$TMP/py.out" 2>&1 <<'PY'
import json, socket, struct, sys
sys.path.insert(0, sys.argv[3] + "/tests/reference")
import sentencepiece as spm
from make_chat_fixtures import encode_dialog
sock_path, model = sys.argv[1], sys.argv[2]
sp = spm.SentencePieceProcessor(model_file=model + "/tokenizer.model")
s = socket.socket(socket.AF_UNIX); s.connect(sock_path); s.settimeout(60)
def send(obj):
    body = json.dumps(obj).encode(); s.sendall(struct.pack(">I", len(body)) + body)
def recv():
    head = b""
    while len(head) < 4: head += s.recv(4 - len(head))
    (n,) = struct.unpack(">I", head); body = b""
    while len(body) < n: body += s.recv(n - len(body))
    return json.loads(body)
def run(req):
    send(dict(req, op="generate", stream=False, max_new_tokens=24, temperature=0, ignore_eos=True))
    while True:
        ev = recv()
        if ev.get("event") in ("done", "error"): return ev
dialogs = [
    [{"role": "user", "content": "Tell me about the cache."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": " How do ranks talk? "},
     {"role": "assistant", "content": "Over NCCL."}, {"role": "user", "content": "And the socket?"}],
]
ok = True
for i, d in enumerate(dialogs):
    a = run({"id": f"m{i}", "messages": d})
    b = run({"id": f"t{i}", "prompt_tokens": encode_dialog(sp, d)})
    same = a.get("event") == "done" and a.get("token_ids") == b.get("token_ids") and a["usage"]["prompt_tokens"] == len(encode_dialog(sp, d))
    print(("ok" if same else "FAIL") + f": dialog {i}: messages == prompt_tokens of Python's encoding ({a.get('usage')})")
    ok &= same
bad = run({"id": "bad", "messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
good = bad.get("event") == "error" and bad.get("code") == "invalid_request" and "where 'assistant' is expected" in bad.get("message", "")
print(("ok" if good else "FAIL") + f": bad dialog refused: {bad.get('message')}")
ok &= good
print(("ok" if run({"id": "after", "prompt": "still up"}).get("event") == "done" else "FAIL") + ": server still serves")
# The same dialogs as batch lines.
with open(sys.argv[1] + ".in.jsonl", "w") as f:
    for i, d in enumerate(dialogs):
        f.write(json.dumps({"custom_id": f"m{i}", "messages": d, "max_new_tokens": 24, "temperature": 0, "ignore_eos": True}) + "\n")
        f.write(json.dumps({"custom_id": f"t{i}", "prompt_tokens": encode_dialog(sp, d), "max_new_tokens": 24, "temperature": 0, "ignore_eos": True}) + "\n")
PY
while read -r line; do
  case "$line" in ok*) pass "${line#ok: }" ;; *) fail "${line#FAIL: }" ;; esac
done < <(grep -E "^(ok|FAIL)" "$TMP/py.out")
grep -q "^FAIL\|Traceback" "$TMP/py.out" && { fail "python side"; cat "$TMP/py.out"; }
kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null
run_capture chatbatch 2 batch --model "$M" --input "$SOCK.in.jsonl" --output "$TMP/out.jsonl" --quiet
"$PY" - "$TMP/out.jsonl" <<'PY' && pass "batch: messages lines == their prompt_tokens lines" || fail "batch messages lines"
import json, sys
r = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
assert all(r[f"m{i}"]["token_ids"] == r[f"t{i}"]["token_ids"] for i in range(2)), r
PY
echo "$PASSES passed, $FAILURES failed"
[[ $FAILURES -eq 0 ]]
