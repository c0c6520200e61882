#!/usr/bin/env bash
# `logprobs` / `top_logprobs` end to end (docs/PROTOCOL.md): a real 2-rank `serve` and a `batch`
# job. Checks: the keys appear only when asked; every alternative list is sorted, sums to at most
# 1 in probability, and a greedy token is its own first alternative; a sampled token's logprob is
# at most the first alternative's; the non-streamed `done` and a batch line carry the same
# per-token values as the stream; bad values are refused with one message naming the range, and
# the server goes on. The values themselves are checked against Hugging Face by
# llama2_reference_test.
#   usage: logprobs_serve.sh LLAMA2 MODELS        (python3, standard library only)
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
M=$MODELS/tiny-gqa
SOCK=$TMP/lp.sock
"$MPIRUN" 2 "$LLAMA2" serve --model "$M" --socket "$SOCK" --quiet >"$TMP/serve.log" 2>&1 &
server=$!
for _ in $(seq 300); do [[ -S "$SOCK" ]] && break; sleep 0.1; done
[[ -S "$SOCK" ]] || { fail "server did not start"; cat "$TMP/serve.log"; exit 1; }
python3 - "$SOCK" >"$TMP/py.out" 2>&1 <<'PY'
import json, math, socket, struct, sys
sock_path = sys.argv[1]
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
    send(dict({"op": "generate", "prompt": "The cache", "max_new_tokens": 12, "ignore_eos": True}, **req))
    tokens = []
    while True:
        ev = recv()
        if ev.get("event") == "token": tokens.append(ev)
        if ev.get("event") in ("done", "error"): return tokens, ev
ok = True
def check(cond, what):
    global ok
    print(("ok" if cond else "FAIL") + ": " + what)
    ok &= bool(cond)
def sane(top, k):
    lps = [t["logprob"] for t in top]
    return (len(top) == k and all(isinstance(t["token_id"], int) for t in top)
            and all(x <= 0 for x in lps) and lps == sorted(lps, reverse=True)
            and sum(math.exp(x) for x in lps) <= 1 + 1e-5)

toks, done = run({"id": "plain", "temperature": 0})
check(done["event"] == "done" and toks and all("logprob" not in t and "top_logprobs" not in t for t in toks),
      "no logprobs keys in token events when not asked")
toks, done = run({"id": "plain2", "temperature": 0, "stream": False})
check("logprobs" not in done and "top_logprobs" not in done, "no logprobs keys in done when not asked")

greedy, done = run({"id": "g", "temperature": 0, "logprobs": True, "top_logprobs": 5})
check(done["event"] == "done" and len(greedy) == 12, "greedy stream with logprobs finished")
check(all(sane(t["top_logprobs"], 5) for t in greedy), "alternatives: 5, sorted, sum of exp <= 1")
check(all(t["top_logprobs"][0]["token_id"] == t["token_id"] and t["top_logprobs"][0]["logprob"] == t["logprob"]
          for t in greedy), "greedy: the chosen token is the first alternative, same logprob")

_, whole = run({"id": "g2", "temperature": 0, "logprobs": True, "top_logprobs": 5, "stream": False})
check(whole.get("logprobs") == [t["logprob"] for t in greedy]
      and whole.get("top_logprobs") == [t["top_logprobs"] for t in greedy]
      and whole.get("token_ids") == [t["token_id"] for t in greedy],
      "done (stream false) carries the streamed per-token values")

sampled, done = run({"id": "s", "temperature": 1.0, "top_p": 0.9, "seed": 7, "logprobs": True, "top_logprobs": 3})
check(done["event"] == "done" and all(sane(t["top_logprobs"], 3) and t["logprob"] <= t["top_logprobs"][0]["logprob"] + 1e-6
          for t in sampled), "sampled (top_p): chosen logprob <= the first alternative's")
check(all(a["logprob"] == t["logprob"] for t in sampled for a in t["top_logprobs"] if a["token_id"] == t["token_id"]),
      "sampled: a chosen token among the alternatives has the same logprob there")
zero, _ = run({"id": "z", "temperature": 0, "top_k": 4, "logprobs": True})
check(zero and all(t["top_logprobs"] == [] and t["logprob"] <= 0 for t in zero),
      "logprobs without top_logprobs: the chosen token's logprob, no alternatives")

for req, msg in [({"logprobs": True, "top_logprobs": 21}, "top_logprobs must be in [0, 20] (got 21)"),
                 ({"logprobs": True, "top_logprobs": -1}, "top_logprobs must be in [0, 20] (got -1)"),
                 ({"top_logprobs": 2}, "top_logprobs needs logprobs set to true"),
                 ({"logprobs": "yes"}, "\"logprobs\" must be a boolean")]:
    _, ev = run(dict(req, id="bad"))
    check(ev["event"] == "error" and ev["code"] == "invalid_request" and msg in ev["message"],
          f"refused: {ev.get('message')}")
_, after = run({"id": "after", "temperature": 0})
check(after["event"] == "done", "server still serves")
with open(sock_path + ".greedy.json", "w") as f:
    json.dump(whole, f)
with open(sock_path + ".in.jsonl", "w") as f:
    f.write(json.dumps({"custom_id": "lp", "prompt": "The cache", "max_new_tokens": 12, "ignore_eos": True,
                        "temperature": 0, "logprobs": True, "top_logprobs": 5}) + "\n")
    f.write(json.dumps({"custom_id": "plain", "prompt": "The cache", "max_new_tokens": 12, "ignore_eos": True,
                        "temperature": 0}) + "\n")
PY
while read -r line; do
  case "$line" in ok*) pass "${line#ok: }" ;; *) fail "${line#FAIL: }" ;; esac
done < <(grep -E "^(ok|FAIL)" "$TMP/py.out")
grep -q "Traceback" "$TMP/py.out" && { fail "python side"; cat "$TMP/py.out"; }
kill -INT "$server" 2>/dev/null; wait "$server" 2>/dev/null
run_capture lpbatch 2 batch --model "$M" --input "$SOCK.in.jsonl" --output "$TMP/out.jsonl" --quiet
python3 - "$TMP/out.jsonl" "$SOCK.greedy.json" <<'PY' && pass "batch: per-token arrays only when asked, equal to serve's" || fail "batch logprobs lines"
import json, sys
r = {l["custom_id"]: l for l in map(json.loads, open(sys.argv[1]))}
g = json.load(open(sys.argv[2]))
assert "logprobs" not in r["plain"] and "top_logprobs" not in r["plain"], r["plain"]
lp = r["lp"]
assert lp["token_ids"] == g["token_ids"], (lp, g)
assert all(abs(a - b) <= 1e-5 for a, b in zip(lp["logprobs"], g["logprobs"])) and len(lp["logprobs"]) == 12, lp
assert [[t["token_id"] for t in s] for s in lp["top_logprobs"]] == [[t["token_id"] for t in s] for s in g["top_logprobs"]], lp
PY
finish
