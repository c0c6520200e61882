#!/usr/bin/env python3
"""Decode tok/s vs batch size from llama2_bench_e2e logs, one line per series.

    python3 benchmarks/e2e/plot_logs.py OUT.png "LABEL=LOG[,LOG...]" ["LABEL=LOG[,LOG...]" ...]

Each series is the median, per batch size, of the `decode  batch  B:  X tok/s` lines of its logs
(e.g. two alternating runs of the same A/B side, and the batch-1 run next to the larger ones).
Prints the table it plots. Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import re
import statistics
import sys

LINE = re.compile(r"decode\s+batch\s+(\d+):\s+([\d.]+) tok/s")


def series(spec):
    label, _, logs = spec.partition("=")
    if not logs:
        sys.exit(f"plot_logs.py: '{spec}': expected LABEL=LOG[,LOG...]")
    by_batch = {}
    for path in logs.split(","):
        with open(path) as f:
            for m in LINE.finditer(f.read()):
                by_batch.setdefault(int(m.group(1)), []).append(float(m.group(2)))
    if not by_batch:
        sys.exit(f"plot_logs.py: no decode lines in {logs}")
    return label, sorted((b, statistics.median(v)) for b, v in by_batch.items())


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, specs = sys.argv[1], [series(s) for s in sys.argv[2:]]
    for label, points in specs:
        print(f"{label}: " + ", ".join(f"{b}: {t:,.1f}" for b, t in points))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ticks = set()
    for label, points in specs:
        xs, ys = zip(*points)
        ticks.update(xs)
        ax.plot(xs, ys, marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(sorted(ticks))
    ax.set_xticklabels([str(t) for t in sorted(ticks)])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("batch size (sequences per decode step)")
    ax.set_ylabel("generated tokens / s (whole batch)")
    ax.set_title("Llama-2-7B decode on one H200, synthetic weights, 128-token prompts", fontsize=10)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
