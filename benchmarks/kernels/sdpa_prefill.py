#!/usr/bin/env python3
"""PyTorch SDPA causal attention at the shapes `llama2_bench_kernels prefill` times (the peer side of
the prefill attention comparison; run both in one device call).

    python3 benchmarks/kernels/sdpa_prefill.py

One sequence, 32 heads x 128, contiguous [1, heads, tokens, 128] tensors (SDPA has no paged
layout). New tokens == context: `is_causal=True` under the flash backend only. A cached prefix
(new < context): the lower-right causal mask (torch.nn.attention.bias.causal_lower_right), with
whichever backend PyTorch picks for it (printed). Timing: CUDA events around each call, 5 warm-ups,
median of 30, as bench_kernels.cu. FLOPs, as bench_kernels.cu:
    4 * heads * head_dim * sum over the new tokens of the keys each attends to
  = 4 * heads * head_dim * (new * (ctx - new) + new * (new + 1) / 2).
The last column also gives 4 * heads * head_dim * new * ctx / time (every key counted, masked or
not), the convention some published figures use.
Stdlib + torch only.
"""
import statistics
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.bias import causal_lower_right

HEADS, DIM = 32, 128
SHAPES = [(2048, 2048), (4096, 4096), (512, 2048), (2048, 4096)]  # (new tokens, context)


def median_ms(fn):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(30):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def bench(dtype, new, ctx, kv_heads=HEADS):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.rand(1, HEADS, new, DIM, device="cuda", dtype=dtype, generator=g) * 4 - 2
    k = torch.rand(1, kv_heads, ctx, DIM, device="cuda", dtype=dtype, generator=g) * 2 - 1
    v = torch.rand(1, kv_heads, ctx, DIM, device="cuda", dtype=dtype, generator=g) * 2 - 1
    gqa = kv_heads != HEADS
    if new == ctx:
        backend = "flash"

        def fn():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    else:
        backend = "auto, lower-right mask"
        mask = causal_lower_right(new, ctx)

        def fn():
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)

    try:
        ms = median_ms(fn)
    except RuntimeError as e:  # a backend that refuses the shape: say so, keep going
        print(f"  sdpa {str(dtype)[6:]:9} new={new} ctx={ctx}: not run ({str(e).splitlines()[0]})")
        return
    pairs = new * (ctx - new) + new * (new + 1) / 2
    tf = 4 * HEADS * DIM * pairs / (ms * 1e-3) / 1e12
    tf_full = 4 * HEADS * DIM * new * ctx / (ms * 1e-3) / 1e12
    kv = f" kv_heads={kv_heads}" if gqa else ""
    print(f"  sdpa {str(dtype)[6:]:9} new={new:<5} ctx={ctx:<5}{kv} {ms * 1e3:9.2f} us "
          f"{tf:7.1f} TFLOP/s   ({backend}; every key counted: {tf_full:.1f})")


def main():
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to benchmark")
        return 0
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; "
          f"SDPA causal, heads {HEADS}, head_dim {DIM}, batch 1")
    for dtype in (torch.float16, torch.bfloat16):
        for new, ctx in SHAPES:
            bench(dtype, new, ctx)
    print("  (70B shapes on 2 ranks: 32 query heads, 4 KV heads)")
    bench(torch.float16, 2048, 2048, kv_heads=4)
    return 0


if __name__ == "__main__":
    sys.exit(main())
