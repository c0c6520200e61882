#!/usr/bin/env python3
"""TTFT of a prompt whose prefix is cached vs one whose prefix is not, against a running
`llama2 serve` socket (issue 19: a 1,024-token shared prefix + 32-token suffix).

    python3 benchmarks/prefix/prefix_ttft.py --socket /tmp/llama2.sock --json out.json \
        [--trials 8] [--prefix-len 1024] [--suffix-len 32] [--max-new-tokens 32] [--vocab 32000]

One request at a time (nothing queues): per trial a fresh random prefix P, then
  miss: P + suffix a   (P is new: the whole prompt is computed; its full blocks get cached)
  hit:  P + suffix b   (P's full blocks are found cached: only the suffix is computed)
Both greedy with ignore_eos, streamed; TTFT = first `token` event - send, on the client. A warm-up
request comes first. The tokens of every request are recorded, so two runs (prefix caching on and
off) can be compared token for token (benchmarks/prefix/prefix_ttft.sh does). The server's
`health` prefix-cache counters are recorded before and after. Standard library only.
"""
import argparse
import json
import random
import socket
import statistics
import struct
import sys
import time


class Conn:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.buf = b""

    def send(self, obj):
        body = json.dumps(obj, separators=(",", ":")).encode()
        self.s.sendall(struct.pack(">I", len(body)) + body)

    def recv(self):
        while True:
            if len(self.buf) >= 4:
                (n,) = struct.unpack(">I", self.buf[:4])
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return json.loads(body)
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise ConnectionError("server closed the connection")
            self.buf += chunk

    def generate(self, rid, prompt, max_new):
        """(ttft seconds, token ids, done event)."""
        sent = time.perf_counter()
        self.send({"op": "generate", "id": rid, "prompt_tokens": prompt, "max_new_tokens": max_new,
                   "temperature": 0, "ignore_eos": True, "stream": True})
        ttft, tokens = None, []
        while True:
            ev = self.recv()
            kind = ev.get("event")
            if kind == "token" and ev.get("id") == rid:
                if ttft is None:
                    ttft = time.perf_counter() - sent
                tokens.append(ev["token_id"])
            elif kind == "done" and ev.get("id") == rid:
                return ttft, tokens, ev
            elif kind == "error":
                raise RuntimeError(f"request {rid}: {ev}")

    def health(self):
        self.send({"op": "health"})
        while True:
            ev = self.recv()
            if ev.get("event") == "health":
                return ev


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--prefix-len", type=int, default=1024)
    ap.add_argument("--suffix-len", type=int, default=32)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--seed", type=int, default=19)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    toks = lambda n: [rng.randrange(3, args.vocab) for _ in range(n)]

    c = Conn(args.socket)
    c.generate("warmup", toks(args.prefix_len + args.suffix_len), args.max_new_tokens)
    before = c.health().get("prefix_cache", {})
    trials = []
    for i in range(args.trials):
        prefix = toks(args.prefix_len)
        row = {}
        for kind in ("miss", "hit"):
            prompt = prefix + toks(args.suffix_len)
            ttft, tokens, done = c.generate(f"{kind}{i}", prompt, args.max_new_tokens)
            row[kind] = {"ttft_s": ttft, "tokens": tokens, "prompt": prompt,
                         "server_ttft_s": done.get("timings", {}).get("time_to_first_token_s")}
        trials.append(row)
        print(f"trial {i}: TTFT miss {row['miss']['ttft_s'] * 1e3:.2f} ms, "
              f"hit {row['hit']['ttft_s'] * 1e3:.2f} ms", flush=True)
    after = c.health().get("prefix_cache", {})
    med = {k: statistics.median(t[k]["ttft_s"] for t in trials) for k in ("miss", "hit")}
    out = {
        "prefix_len": args.prefix_len, "suffix_len": args.suffix_len,
        "max_new_tokens": args.max_new_tokens, "trials": trials,
        "median_ttft_miss_s": med["miss"], "median_ttft_hit_s": med["hit"],
        "hit_over_miss": med["hit"] / med["miss"],
        "prefix_cache_before": before, "prefix_cache_after": after,
    }
    json.dump(out, open(args.json, "w"))
    print(f"median TTFT: miss {med['miss'] * 1e3:.2f} ms, hit {med['hit'] * 1e3:.2f} ms "
          f"({100 * out['hit_over_miss']:.1f}% of the miss); prefix cache hit tokens "
          f"{after.get('hit_tokens', 0) - before.get('hit_tokens', 0)} over "
          f"{after.get('queried_tokens', 0) - before.get('queried_tokens', 0)} queried")


if __name__ == "__main__":
    sys.exit(main())
