#!/usr/bin/env python3
"""Serving benchmark: Poisson arrivals against a running `llama2 serve` socket.

    python3 benchmarks/serve/bench_serve.py --socket /tmp/llama2.sock --rates 8,16,32,inf \
        --requests 400 --prompt-len 128 --max-new-tokens 128 --json out.json

Each request is a `generate` with `prompt_tokens` (random ids, fixed seed), `max_new_tokens`
tokens forced with `ignore_eos`, greedy, streaming. Arrivals follow a Poisson process at each
rate (requests/s; `inf` sends them all at once: the saturation point). Requests are spread over
a pool of `--connections` connections (as a JVM client pool would), several in flight on each,
interleaved by id; one reader task per connection routes events to their request.

Measured per request on the client: TTFT = first `token` event - send time; inter-token
latencies = gaps between consecutive `token` events; end-to-end = `done` - send. Reported per
rate: completed requests, generated tok/s (all completion tokens / (last done - first send)),
TTFT p50/p99, inter-token p50/p99, end-to-end p50. Standard library only (the GPU nodes have no
pip access).
"""
import argparse
import asyncio
import json
import math
import platform
import random
import struct
import sys
import time


def frame(obj):
    body = json.dumps(obj, separators=(",", ":")).encode()
    return struct.pack(">I", len(body)) + body


async def read_frame(reader):
    head = await reader.readexactly(4)
    (n,) = struct.unpack(">I", head)
    return json.loads(await reader.readexactly(n))


class Connection:
    """One socket; events are routed to per-request queues by id."""

    def __init__(self, reader, writer):
        self.reader, self.writer, self.queues = reader, writer, {}
        self.task = asyncio.ensure_future(self.route())

    async def route(self):
        try:
            while True:
                ev = await read_frame(self.reader)
                q = self.queues.get(ev.get("id"))
                if q is not None:
                    q.put_nowait((time.perf_counter(), ev))
        except (asyncio.IncompleteReadError, ConnectionError):
            for q in self.queues.values():
                q.put_nowait((time.perf_counter(), {"event": "error", "code": "disconnected"}))


async def one_request(conn, rid, prompt, max_new, t_send_target, t0, out, extra=None):
    delay = t_send_target - (time.perf_counter() - t0)
    if delay > 0:
        await asyncio.sleep(delay)
    q = asyncio.Queue()
    conn.queues[rid] = q
    sent = time.perf_counter()
    req = {"op": "generate", "id": rid, "prompt_tokens": prompt, "max_new_tokens": max_new,
           "temperature": 0, "ignore_eos": True, "stream": True}
    # --extra: more request fields; a null value removes one (a constraint refuses ignore_eos).
    req.update(extra or {})
    conn.writer.write(frame({k: v for k, v in req.items() if v is not None}))
    token_times, rec = [], {"id": rid, "sent": sent - t0}
    while True:
        now, ev = await q.get()
        kind = ev.get("event")
        if kind == "token":
            token_times.append(now)
        elif kind == "done":
            rec.update(done=now - t0, tokens=ev["usage"]["completion_tokens"],
                       finish=ev["finish_reason"])
            break
        elif kind == "error":
            rec.update(error=ev.get("code"), message=ev.get("message"), done=now - t0)
            break
    del conn.queues[rid]
    if token_times:
        rec["ttft"] = token_times[0] - sent
        rec["itl"] = [b - a for a, b in zip(token_times, token_times[1:])]
    out.append(rec)


def pct(values, q):
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


async def run_rate(path, rate, n, prompt_len, max_new, vocab, seed, connections, extra=None):
    rng = random.Random(seed)
    t, arrivals = 0.0, []
    for _ in range(n):
        arrivals.append(t)
        if rate != math.inf:
            t += rng.expovariate(rate)
    prompts = [[rng.randrange(3, vocab) for _ in range(prompt_len)] for _ in range(n)]
    conns = []
    for _ in range(min(connections, n)):
        conns.append(Connection(*await asyncio.open_unix_connection(path)))
    out = []
    t0 = time.perf_counter()
    await asyncio.gather(*(one_request(conns[i % len(conns)], f"r{rate}-{i}", prompts[i], max_new,
                                       arrivals[i], t0, out, extra) for i in range(n)))
    for c in conns:
        c.writer.close()
        c.task.cancel()
    ok = [r for r in out if "error" not in r]
    errors = {}
    for r in out:
        if "error" in r:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    span = max(r["done"] for r in out) - min(r["sent"] for r in out)
    tokens = sum(r.get("tokens", 0) for r in ok)
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    itl = [x for r in ok for x in r.get("itl", [])]
    e2e = [r["done"] - r["sent"] for r in ok]
    return {"rate_rps": None if rate == math.inf else rate, "requests": n, "completed": len(ok),
            "errors": errors, "duration_s": span, "generated_tok_s": tokens / span if span > 0 else 0,
            "mean_tokens": tokens / len(ok) if ok else 0,
            "ttft_p50_s": pct(ttft, 50), "ttft_p99_s": pct(ttft, 99),
            "itl_p50_s": pct(itl, 50), "itl_p99_s": pct(itl, 99), "e2e_p50_s": pct(e2e, 50)}


async def health(path):
    reader, writer = await asyncio.open_unix_connection(path)
    writer.write(frame({"op": "health"}))
    await writer.drain()
    ev = await read_frame(reader)
    writer.close()
    return ev


async def main_async(args):
    rates = [math.inf if r.strip() in ("inf", "max") else float(r) for r in args.rates.split(",")]
    info = await health(args.socket)
    results = []
    for i, rate in enumerate(rates):
        r = await run_rate(args.socket, rate, args.requests, args.prompt_len, args.max_new_tokens,
                           args.vocab, args.seed + i, args.connections, args.extra)
        results.append(r)
        print(f"rate {'inf' if rate == math.inf else rate:>6} req/s: {r['completed']}/{r['requests']} done, "
              f"{r['generated_tok_s']:8.0f} tok/s, TTFT p50 {r['ttft_p50_s']*1e3:7.1f} ms "
              f"p99 {r['ttft_p99_s']*1e3:7.1f} ms, ITL p50 {r['itl_p50_s']*1e3:6.2f} ms "
              f"p99 {r['itl_p99_s']*1e3:6.2f} ms, {r['mean_tokens']:.1f} tokens per request, "
              f"errors {r['errors']}", flush=True)
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "host": platform.node(),
            "command": " ".join(sys.argv), "server": info, "prompt_len": args.prompt_len,
            "max_new_tokens": args.max_new_tokens, "results": results}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--rates", default="inf", help="comma-separated requests/s; inf = all at once")
    ap.add_argument("--requests", type=int, default=200, help="requests per rate")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=32000, help="prompt ids are drawn from [3, vocab)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--connections", type=int, default=64, help="client connections (a pool)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--extra", type=json.loads, default=None,
                    help='JSON object merged into every request, e.g. \'{"regex": "[a-z]*", '
                         '"ignore_eos": null}\' (null removes a field)')
    args = ap.parse_args()
    if min(args.requests, args.prompt_len, args.max_new_tokens, args.connections) < 1:
        ap.error("--requests, --prompt-len, --max-new-tokens and --connections must be >= 1")
    report = asyncio.run(main_async(args))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
