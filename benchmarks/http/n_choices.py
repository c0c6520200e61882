#!/usr/bin/env python3
"""Issue 35's `n` figure: one request with n = 4 choices against one with n = 1, alone on an idle
server, and how many prompt tokens the n = 4 request found in the prefix cache (its prompt is
prefilled once; the other choices share its full KV blocks). Standard library only (the GPU nodes
have no pip).

    python3 benchmarks/http/n_choices.py --url http://127.0.0.1:PORT --model NAME \
        [--trials 5] [--prompt-len 128] [--max-tokens 128] [--vocab 32000] [--json out.json]

Each trial sends a fresh random token-id prompt (so no trial hits another's cache) through
/v1/completions, not streamed, with `min_tokens` = `max_tokens` so every choice generates the same
number of tokens whatever the weights; n = 1 and n = 4 alternate. Per n: the median end-to-end
time. For n = 4: the change of `llama2_prefix_cache_hits_total` and `..._queries_total` across the
request (from /metrics), against what sharing predicts: (n - 1) x the prompt's full blocks.
"""
import argparse
import json
import random
import statistics
import sys
import time
import urllib.request


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.load(r)


def counter(base, name):
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
    raise SystemExit(f"n_choices.py: /metrics has no {name}")


def one(args, rng, n):
    prompt = [rng.randrange(3, args.vocab) for _ in range(args.prompt_len)]
    body = {"model": args.model, "prompt": prompt, "n": n, "max_tokens": args.max_tokens,
            "min_tokens": args.max_tokens, "temperature": 1.0, "seed": rng.randrange(1 << 30)}
    hits0 = counter(args.url, "llama2_prefix_cache_hits_total")
    queries0 = counter(args.url, "llama2_prefix_cache_queries_total")
    t0 = time.perf_counter()
    r = post(args.url + "/v1/completions", body)
    dt = time.perf_counter() - t0
    got = [c["index"] for c in r["choices"]]
    if sorted(got) != list(range(n)) or r["usage"]["completion_tokens"] != n * args.max_tokens:
        raise SystemExit(f"n_choices.py: unexpected answer for n = {n}: choices {got}, usage {r['usage']}")
    return {"n": n, "seconds": dt,
            "prefix_hits": counter(args.url, "llama2_prefix_cache_hits_total") - hits0,
            "prefix_queries": counter(args.url, "llama2_prefix_cache_queries_total") - queries0}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = random.Random(35)
    one(args, rng, 1)  # warm-up: the first request allocates what later ones reuse
    runs = [one(args, rng, n) for _ in range(args.trials) for n in (1, 4)]
    t1 = statistics.median(r["seconds"] for r in runs if r["n"] == 1)
    t4 = statistics.median(r["seconds"] for r in runs if r["n"] == 4)
    hits4 = statistics.median(r["prefix_hits"] for r in runs if r["n"] == 4)
    # The last prompt token is computed per choice, so sharing covers the full blocks before it.
    shared = (args.prompt_len - 1) // args.block_size * args.block_size
    result = {"n1_s": t1, "n4_s": t4, "ratio": t4 / t1, "n4_prefix_hits_median": hits4,
              "expected_hits": 3 * shared, "runs": runs, "args": vars(args)}
    print(f"n = 1: {t1:.3f} s, n = 4: {t4:.3f} s (medians of {args.trials}): {t4 / t1:.3f}x; "
          f"n = 4 prefix-cache hits {hits4:.0f} tokens (sharing predicts {3 * shared})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
