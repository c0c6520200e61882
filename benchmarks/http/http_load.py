#!/usr/bin/env python3
"""Load generator for `llama2 serve --http` (any OpenAI-compatible server): standard library only
(the GPU nodes have Python but no pip, Node.js or Java).

    # the Gatling-style scenario: 20 new users per second for 60 s, each a streamed chat
    # completion with a ~128-token prompt and 128 new tokens
    python3 benchmarks/http/http_load.py --url http://127.0.0.1:8000 --model NAME \
        --rate 20 --duration 60 --json out.json
    # saturation, as benchmarks/serve/bench_serve.py measures it on the socket: every request at
    # once, random token-id prompts through /v1/completions
    python3 benchmarks/http/http_load.py --url ... --model NAME --endpoint completions \
        --rate inf --requests 1024 --json out.json

Arrivals are at a constant rate (request i is sent at i / rate s; `inf`: all at once), each on its
own connection (as load-testing tools open one per virtual user). Streamed responses are read as
SSE; per request: TTFT = first chunk carrying a token - send time, end-to-end = `data: [DONE]` -
send time; usage comes from stream_options.include_usage. Reported: completed, errors by HTTP
status / kind, generated tok/s (completion tokens / (last end - first send)), TTFT and end-to-end
p50 / p99 (and p90), mean prompt tokens. `--max-p99-e2e S` makes the exit code 1 when the p99
end-to-end latency exceeds S seconds or any request failed (the CI smoke test uses it).
"""
import argparse
import asyncio
import json
import math
import random
import resource
import sys
import time
from urllib.parse import urlparse

WORDS = ("the cache holds keys and values for every layer of the model while the scheduler "
         "admits requests in arrival order and each rank runs its slice of the weights").split()


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo, hi = math.floor(k), math.ceil(k)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def body_for(args, i, rng):
    common = {"model": args.model, "max_tokens": args.max_tokens, "temperature": args.temperature,
              "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    if args.endpoint == "chat":
        # Words enough for about --prompt-tokens with this server's tokenizer (calibrate()).
        n = max(1, round(args.prompt_tokens / args.tokens_per_word))
        text = " ".join(rng.choice(WORDS) for _ in range(n))
        return "/v1/chat/completions", dict(common, messages=[{"role": "user", "content": f"{i}: {text}"}])
    ids = [1] + [rng.randrange(3, args.vocab) for _ in range(args.prompt_tokens - 1)]
    return "/v1/completions", dict(common, prompt=ids)


async def read_head(reader):
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("connection closed before the status line")
    status = int(status_line.split()[1])
    headers = {}
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return status, headers


async def read_body(reader, headers):
    """Yields the body's bytes as they arrive (chunked or with a Content-Length)."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            if size == 0:
                await reader.readline()
                return
            yield await reader.readexactly(size)
            await reader.readline()
    else:
        n = int(headers.get("content-length", "0"))
        if n:
            yield await reader.readexactly(n)


async def one(args, i, rng_seed, t_send, t0, results):
    delay = t_send - (time.perf_counter() - t0)
    if delay > 0:
        await asyncio.sleep(delay)
    rng = random.Random(rng_seed)
    path, body = body_for(args, i, rng)
    u = urlparse(args.url)
    r = {"sent": time.perf_counter() - t0}
    try:
        reader, writer = await asyncio.open_connection(u.hostname, u.port or 80, limit=1 << 20)
        payload = json.dumps(body).encode()
        head = (f"POST {path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(payload)}\r\nConnection: close\r\n")
        if args.api_key:
            head += f"Authorization: Bearer {args.api_key}\r\n"
        writer.write(head.encode() + b"\r\n" + payload)
        await writer.drain()
        status, headers = await read_head(reader)
        if status != 200:
            data = b"".join([c async for c in read_body(reader, headers)])
            try:
                code = json.loads(data)["error"].get("code")
            except (ValueError, KeyError, TypeError):
                code = None
            r["error"] = f"HTTP {status}" + (f" {code}" if code else "")
        else:
            buf = b""
            async for chunk in read_body(reader, headers):
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    if not event.startswith(b"data: "):
                        continue
                    data = event[6:]
                    now = time.perf_counter() - t0
                    if data == b"[DONE]":
                        r["end"] = now
                        continue
                    if "ttft" not in r and (b'"content":"' in data or b'"text":"' in data):
                        ch = json.loads(data)["choices"]
                        if ch and (ch[0].get("delta", {}).get("content") or ch[0].get("text")):
                            r["ttft"] = now - r["sent"]
                    if b'"error"' in data and b'"choices"' not in data:
                        r["error"] = "stream error " + json.loads(data)["error"].get("code", "")
                    elif b'"usage":{' in data:
                        usage = json.loads(data)["usage"]
                        r["prompt_tokens"] = usage["prompt_tokens"]
                        r["completion_tokens"] = usage["completion_tokens"]
            if "end" not in r and "error" not in r:
                r["error"] = "stream ended without [DONE]"
        writer.close()
    except (OSError, ConnectionError, asyncio.IncompleteReadError, ValueError) as e:
        r["error"] = type(e).__name__
        r["detail"] = f"{e} (after {time.perf_counter() - t0 - r['sent']:.3f} s)"
    results.append(r)


async def calibrate(args):
    """Tokens per word of this server's chat prompts, from one short request's usage."""
    probe = argparse.Namespace(**vars(args))
    probe.tokens_per_word, probe.max_tokens = 1.0, 1
    results = []
    await one(probe, 0, args.seed, 0.0, time.perf_counter(), results)
    r = results[0]
    if "error" in r or "prompt_tokens" not in r:
        sys.exit(f"http_load: the calibration request failed: {r.get('error', 'no usage')}")
    args.tokens_per_word = r["prompt_tokens"] / args.prompt_tokens


async def run_share(args, t0, worker):
    """Requests worker, worker + procs, ... (all of them with one process), from time t0 on."""
    n = args.requests if args.requests else int(args.rate * args.duration)
    results = []
    tasks = [one(args, i, args.seed * 1000003 + i, 0.0 if math.isinf(args.rate) else i / args.rate,
                 t0, results) for i in range(worker, n, args.procs)]
    await asyncio.gather(*tasks)
    return results


def run_worker(job):
    args, t0, worker = job
    return asyncio.run(run_share(args, t0, worker))


def run(args):
    if args.endpoint == "chat":
        asyncio.run(calibrate(args))
    if args.procs == 1:
        return asyncio.run(run_share(args, time.perf_counter(), 0))
    # Several client processes, so that the client's own CPU (one Python thread parsing every
    # SSE chunk) cannot be what limits the measured rate. perf_counter is the system's monotonic
    # clock, shared by the forked workers: they all count from the same t0.
    import multiprocessing
    t0 = time.perf_counter() + 0.5
    with multiprocessing.get_context("fork").Pool(args.procs) as pool:
        shares = pool.map(run_worker, [(args, t0, w) for w in range(args.procs)])
    return [r for share in shares for r in share]


def report(args, results):
    ok = [r for r in results if "error" not in r]
    errors = {}
    for r in results:
        if "error" in r:
            errors[r["error"]] = errors.get(r["error"], 0) + 1
    ttft = [r["ttft"] for r in ok if "ttft" in r]
    e2e = [r["end"] - r["sent"] for r in ok]
    tokens = sum(r.get("completion_tokens", 0) for r in ok)
    span = (max(r["end"] for r in ok) - min(r["sent"] for r in results)) if ok else float("nan")
    out = {
        "url": args.url, "endpoint": args.endpoint, "rate": args.rate, "requests": len(results),
        "completed": len(ok), "errors": errors,
        "generated_tok_s": tokens / span if ok and span > 0 else 0.0,
        "mean_prompt_tokens": sum(r.get("prompt_tokens", 0) for r in ok) / len(ok) if ok else 0,
        "ttft_p50_s": percentile(ttft, 50), "ttft_p90_s": percentile(ttft, 90),
        "ttft_p99_s": percentile(ttft, 99),
        "e2e_p50_s": percentile(e2e, 50), "e2e_p90_s": percentile(e2e, 90),
        "e2e_p99_s": percentile(e2e, 99), "span_s": span,
        # The first failures as they happened (request index order), to tell a refused connect
        # from a connection the server closed, and when.
        "error_samples": [{"sent_s": round(r["sent"], 3), "error": r["error"],
                           "detail": r.get("detail", "")} for r in results if "error" in r][:20],
    }
    print(f"{out['completed']}/{out['requests']} completed, errors {errors or 'none'}; "
          f"{out['generated_tok_s']:.0f} generated tok/s; prompt {out['mean_prompt_tokens']:.0f} tok; "
          f"TTFT p50 {out['ttft_p50_s']:.3f} s p99 {out['ttft_p99_s']:.3f} s; "
          f"end-to-end p50 {out['e2e_p50_s']:.3f} s p99 {out['e2e_p99_s']:.3f} s")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True, help="http://HOST:PORT")
    ap.add_argument("--model", required=True)
    ap.add_argument("--api-key", default="")
    ap.add_argument("--endpoint", choices=("chat", "completions"), default="chat")
    ap.add_argument("--rate", type=float, default=20.0, help="new requests per second (inf: all at once)")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds of arrivals")
    ap.add_argument("--requests", type=int, default=0, help="number of requests (default rate x duration)")
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--vocab", type=int, default=32000, help="token ids drawn below this (completions)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--procs", type=int, default=1, help="client processes sharing the requests")
    ap.set_defaults(tokens_per_word=1.0)
    ap.add_argument("--max-p99-e2e", type=float, help="exit 1 if p99 end-to-end exceeds this or any request failed")
    args = ap.parse_args()
    if math.isinf(args.rate) and not args.requests:
        ap.error("--rate inf needs --requests")
    results = run(args)
    out = report(args, results)
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out["client_cpu_s"] = round(own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime, 2)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": out}, f, indent=1)
    if args.max_p99_e2e is not None and (out["errors"] or not out["completed"] or out["e2e_p99_s"] > args.max_p99_e2e):
        sys.exit(1)


if __name__ == "__main__":
    main()
