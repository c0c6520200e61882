#!/usr/bin/env python3
"""A reference dequantizer for 4-bit AWQ and GPTQ checkpoints, written from the formats' published
descriptions (AutoAWQ's "gemm" packing, AutoGPTQ's v1 and GPTQModel's v2), with numpy and PyPI's
safetensors only (the project's .venv, launch/requirements-test.txt):

    .venv/bin/python tests/reference/dequantize_int4.py QUANTIZED_DIR OUT_DIR

writes OUT_DIR, a float32 Hugging Face folder whose q/k/v/o/gate/up/down_proj.weight [out, in] are

    W[o, i] = (q[i, o] - zero[g(i), o]) * scale[g(i), o]        (float32, one rounding)

  AWQ:  qweight int32 [in, out/8], nibble k of word (i, j) = column 8j + [0,2,4,6,1,3,5,7][k];
        qzeros int32 [in/G, out/8] packed the same way; scales [in/G, out]; g(i) = i // G.
  GPTQ: qweight int32 [in/8, out], nibble k of word (r, o) = row 8r + k; qzeros int32
        [groups, out/8], nibble k = column 8j + k, the zero minus one in checkpoint_format
        "gptq" (v1), the zero itself in "gptq_v2"; scales [groups, out]; g(i) = g_idx[i] (or
        i // G without g_idx).
Every other tensor is copied as float32; config.json loses its quantization_config (settings
may come from quantize_config.json instead). The engine's CPU backend must give this folder's
logits exactly (tests/integration/int4_checkpoint.sh), and transformers on it gives the fixture
the engine is checked against (make_int4_fixtures.py).
"""
import json
import os
import shutil
import sys

import numpy as np
from safetensors.numpy import load_file, save_file

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]
SHIFTS = np.arange(0, 32, 4, dtype=np.uint32)


def nibbles(packed):
    """int32 [r, c] -> uint32 [r, c, 8]: nibble k of each word."""
    return (packed.astype(np.uint32)[:, :, None] >> SHIFTS) & 0xF


def unpack_columns(packed, awq):
    """[r, c/8] -> [r, c]: 8 columns per word, AWQ's order or in sequence."""
    n = nibbles(packed)
    out = np.empty_like(n)
    if awq:
        out[:, :, AWQ_ORDER] = n  # nibble k is column AWQ_ORDER[k] of its 8
    else:
        out[:, :, :] = n
    return out.reshape(packed.shape[0], -1)


def unpack_rows(packed):
    """GPTQ qweight [in/8, out] -> [in, out]: 8 rows per word."""
    n = nibbles(packed)  # [in/8, out, 8]
    return n.transpose(0, 2, 1).reshape(-1, packed.shape[1])


def settings(src):
    cfg = json.load(open(os.path.join(src, "config.json")))
    q = cfg.get("quantization_config")
    if q is None:
        q = json.load(open(os.path.join(src, "quantize_config.json")))
        q.setdefault("quant_method", "gptq")
    return cfg, q


def dequantize(t, module, q):
    awq = q["quant_method"] == "awq"
    qweight, qzeros, scales = t[module + ".qweight"], t[module + ".qzeros"], t[module + ".scales"]
    if awq:
        w4 = unpack_columns(qweight, True)                      # [in, out]
        zeros = unpack_columns(qzeros, True)                    # [groups, out]
    else:
        w4 = unpack_rows(qweight)
        zeros = unpack_columns(qzeros, False)
        if q.get("checkpoint_format", "gptq") != "gptq_v2":
            zeros = zeros + 1
    n_in = w4.shape[0]
    group = q["group_size"] if q["group_size"] > 0 else n_in
    g = t[module + ".g_idx"].astype(np.int64) if module + ".g_idx" in t else np.arange(n_in) // group
    w = (w4.astype(np.float32) - zeros[g].astype(np.float32)) * scales[g].astype(np.float32)
    return np.ascontiguousarray(w.T)                             # [out, in]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    cfg, q = settings(src)
    if q["quant_method"] not in ("awq", "gptq") or q.get("bits", 4) != 4:
        sys.exit(f"{src}: not a 4-bit AWQ/GPTQ checkpoint: {q}")
    t = load_file(os.path.join(src, "model.safetensors"))
    modules = sorted(k[: -len(".qweight")] for k in t if k.endswith(".qweight"))
    out = {k: v.astype(np.float32) for k, v in t.items()
           if not k.endswith((".qweight", ".qzeros", ".scales", ".g_idx"))}
    for m in modules:
        out[m + ".weight"] = dequantize(t, m, q)
    os.makedirs(dst, exist_ok=True)
    save_file(out, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
    cfg.pop("quantization_config", None)
    cfg["torch_dtype"] = "float32"
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=2)
    for f in ("tokenizer.model", "generation_config.json"):
        if os.path.exists(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), dst)
    print(f"wrote {dst}: {len(modules)} projections dequantized ({q['quant_method']}, "
          f"group {q['group_size']})")


if __name__ == "__main__":
    main()
