#!/usr/bin/env python3
"""Where an engine run's time went, by step kind, from a LLAMA2_STEP_LOG file.

    LLAMA2_STEP_LOG=/tmp/steps.txt mpirun ... llama2 serve ...   (or batch)
    python3 benchmarks/serve/step_log_summary.py /tmp/steps.txt

Kinds: decode (every row decodes one token), prefill (only prompt chunks), mixed (both). Per
kind: steps, total and mean step time, tokens the steps produced (logit rows) and their share of
the run's wall time in steps; then rank 0's host time between steps (the 6th column, host_ms,
written since 2026-12-01; older logs have 5 columns), during which the GPUs wait. Standard
library only.
"""
import sys


def main(path):
    kinds = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            fields = line.split()
            decode, ptoks, rows, ms = int(fields[0]), int(fields[2]), int(fields[3]), float(fields[4])
            host_ms = float(fields[5]) if len(fields) > 5 else None
            kind = "mixed" if decode and ptoks else ("decode" if decode else "prefill")
            k = kinds.setdefault(kind, {"steps": 0, "ms": 0.0, "tokens": 0, "rows": 0, "ptoks": 0,
                                        "host_ms": None})
            if host_ms is not None:
                k["host_ms"] = (k["host_ms"] or 0.0) + host_ms
            k["steps"] += 1
            k["ms"] += ms
            k["tokens"] += rows
            k["rows"] += decode
            k["ptoks"] += ptoks
    total = sum(k["ms"] for k in kinds.values()) or 1.0
    print("| kind | steps | total s | share | mean ms | decode rows / step | prompt tokens / step | "
          "tokens out | tok/s in these steps |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for kind in ("decode", "mixed", "prefill"):
        k = kinds.get(kind)
        if not k:
            continue
        n = k["steps"]
        print(f"| {kind} | {n} | {k['ms'] / 1e3:.3f} | {k['ms'] / total:.1%} | {k['ms'] / n:.3f} | "
              f"{k['rows'] / n:.1f} | {k['ptoks'] / n:.1f} | {k['tokens']} | "
              f"{k['tokens'] / (k['ms'] / 1e3) if k['ms'] else 0:.0f} |")
    host = [k["host_ms"] for k in kinds.values() if k["host_ms"] is not None]
    if host:
        steps = sum(k["steps"] for k in kinds.values())
        h = sum(host)
        print(f"\nrank 0 host time before these steps: {h / 1e3:.3f} s ({h / steps:.3f} ms per step, "
              f"{h / (h + total):.1%} of steps + host time)")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: step_log_summary.py STEP_LOG")
    main(sys.argv[1])
