#!/usr/bin/env python3
"""Table and plot of llama2_bench_e2e results.

    python3 benchmarks/e2e/report.py OUT/*.json --md OUT/results.md --png OUT/decode.png

Reads the JSON files written by `llama2_bench_e2e --json`, writes a Markdown table with one row
per (model, tp) -- decode tok/s at each batch size, TTFT and model TFLOP/s at each prefill length,
GPU memory used per GPU -- and a PNG of decode tok/s versus batch size (log-x), one line per row.
Runs that differ in dtype or CUDA graphs get their own rows, labelled accordingly. --md alone needs
only the standard library; --png needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import argparse
import json
import sys

GIB = float(1 << 30)
MODEL_ORDER = {"7b": 0, "13b": 1, "70b": 2}


def load(paths):
    runs = []
    for path in paths:
        try:
            with open(path) as f:
                run = json.load(f)
        except (OSError, ValueError) as e:
            # An interrupted benchmark leaves an empty file behind: skip it, say so.
            print(f"report.py: skipping {path}: {e}", file=sys.stderr)
            continue
        missing = [k for k in ("model", "tp", "decode", "prefill", "memory") if k not in run]
        if missing:
            print(f"report.py: skipping {path}: not a llama2_bench_e2e result "
                  f"(no {', '.join(missing)})", file=sys.stderr)
            continue
        run["_path"] = path
        runs.append(run)
    return runs


def key(run):
    return (MODEL_ORDER.get(run["model"], 99), run["model"], run["tp"],
            run.get("dtype", ""), not run.get("cuda_graphs", True))


def label(run, runs):
    text = f"{run['model']} tp{run['tp']}"
    # Name dtype / graphs only when the inputs mix them; otherwise the header says it once.
    if len({r.get("dtype") for r in runs}) > 1:
        text += f" {run.get('dtype')}"
    if len({r.get("cuda_graphs") for r in runs}) > 1 and not run.get("cuda_graphs", True):
        text += " no-graphs"
    return text


def fmt(value, digits):
    return "" if value is None else f"{value:,.{digits}f}"


def markdown(runs):
    batches = sorted({d["batch"] for r in runs for d in r["decode"]})
    lens = sorted({p["prompt_len"] for r in runs for p in r["prefill"]})
    header = ["model / TP"]
    header += [f"decode tok/s B={b}" for b in batches]
    for p in lens:
        header += [f"TTFT P={p} (ms)", f"TFLOP/s P={p} (per GPU)"]
    header += ["GPU mem used per GPU (GiB)"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for run in runs:
        decode = {d["batch"]: d for d in run["decode"]}
        prefill = {p["prompt_len"]: p for p in run["prefill"]}
        row = [label(run, runs)]
        row += [fmt(decode[b]["tok_s"], 0) if b in decode else "" for b in batches]
        for p in lens:
            e = prefill.get(p)
            row.append(fmt(e["ttft_ms"], 1) if e else "")
            row.append(f"{e['model_tflops']:.1f} ({e['tflops_per_gpu']:.1f})" if e else "")
        mem = sorted(run["memory"], key=lambda m: m["rank"])
        row.append(" / ".join(f"{m['used_bytes'] / GIB:.1f}" for m in mem))
        lines.append("| " + " | ".join(row) + " |")

    notes = ["", "Runs:", ""]
    for run in runs:
        notes.append(
            f"- {label(run, runs)}: {run.get('date', '?')}, host {run.get('host', '?')}, "
            f"{run['tp']} x {run.get('gpu', '?')}, {run.get('dtype', '?')}, CUDA graphs "
            f"{'on' if run.get('cuda_graphs', True) else 'off'}, KV {run.get('kv_blocks', '?')} "
            f"blocks; `{run.get('command', '')}`")
    first = runs[0]
    # Each file states its formula with its own model's numbers; the note gives the shared form.
    formula = next((p["flops_formula"].split(" with ")[0] for r in runs for p in r["prefill"]), None)
    notes += [
        "",
        f"Decode: {first.get('prompt_len', '?')}-token prompts, median tok/s over "
        f"{first.get('repeats', '?')} runs of {first.get('decode_steps', '?')} timed greedy steps "
        "(generated tokens of the whole batch / wall time). TTFT: one prompt of P tokens in one "
        "step, median over repeats. TFLOP/s: whole model over all GPUs (per GPU in brackets)"
        + (f", FLOPs = {formula} (N: layer matmul weights, H: hidden size, V: vocabulary, "
           "L: layers; the LM head runs on the last token only, attention is causal)."
           if formula else "."),
        "GPU memory: cudaMemGetInfo used bytes after setup (weights, KV cache, activations), "
        "one figure per rank.",
    ]
    return "\n".join(lines + notes) + "\n"


def plot(runs, path, logy):
    import matplotlib

    matplotlib.use("Agg")  # no display on the GPU nodes or in CI
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ticks = set()
    for run in runs:
        points = sorted((d["batch"], d["tok_s"]) for d in run["decode"])
        if not points:
            continue
        xs, ys = zip(*points)
        ticks.update(xs)
        ax.plot(xs, ys, marker="o", label=label(run, runs))
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if ticks:
        ax.set_xticks(sorted(ticks))
        ax.set_xticklabels([str(t) for t in sorted(ticks)])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())  # only the measured sizes
    gpus = sorted({r.get("gpu", "?") for r in runs})
    dtypes = sorted({r.get("dtype", "?") for r in runs})
    ax.set_title(f"Decode throughput, synthetic Llama-2, {', '.join(dtypes)}, {', '.join(gpus)}",
                 fontsize=10)
    ax.set_xlabel("batch size (sequences per decode step)")
    ax.set_ylabel("generated tokens / s (whole batch)")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="+", help="result files of llama2_bench_e2e --json")
    ap.add_argument("--md", help="write the Markdown table here")
    ap.add_argument("--png", help="write the decode tok/s plot here (needs matplotlib)")
    ap.add_argument("--logy", action="store_true", help="log scale for tok/s too")
    args = ap.parse_args()
    if not args.md and not args.png:
        ap.error("give --md FILE and/or --png FILE")
    runs = sorted(load(args.json), key=key)
    if not runs:
        sys.exit("report.py: no usable result files")
    if args.md:
        with open(args.md, "w") as f:
            f.write(markdown(runs))
        print(f"wrote {args.md}")
    if args.png:
        try:
            plot(runs, args.png, args.logy)
        except ImportError:
            sys.exit("report.py: --png needs matplotlib: apt-get install python3-matplotlib")
        print(f"wrote {args.png}")


if __name__ == "__main__":
    main()
