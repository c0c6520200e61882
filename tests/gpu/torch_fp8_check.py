#!/usr/bin/env python3
"""Proves our e4m3 encoding is PyTorch's: quantizes a 16-bit model's projections with
torch.float8_e4m3fn by kernels/quant.cu's rule (per output row, s = max|w| / 448 in fp32,
q = (w / s).to(float8_e4m3fn)), compares the bytes and scales with an FP8 checkpoint written by
`llama2 convert-fp8 --scales channel`, and writes torch's own checkpoint (same config.json) for the
engine to read. Runs on the GPU node (torch present; safetensors parsed by hand, no numpy needed).

usage: torch_fp8_check.py SRC_MODEL_DIR OUR_FP8_DIR TORCH_OUT_DIR
"""
import json
import os
import shutil
import struct
import sys

import torch

DTYPES = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32,
          "F8_E4M3": torch.float8_e4m3fn}
NAMES = {v: k for k, v in DTYPES.items()}


def load(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[b:e]), dtype=torch.uint8)
        out[name] = t.view(DTYPES[info["dtype"]]).reshape(info["shape"])
    return out


def to_bytes(t):
    u8 = t.contiguous().view(torch.uint8).reshape(-1)
    try:
        return u8.numpy().tobytes()
    except Exception:  # torch without numpy
        return bytes(u8.tolist())


def save(path, tensors):
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        b = to_bytes(t)
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        chunks.append(b)
        offset += len(b)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def main():
    src, ours_dir, out = sys.argv[1:4]
    weights = load(os.path.join(src, "model.safetensors"))
    ours = load(os.path.join(ours_dir, "model.safetensors"))
    result, byte_mismatch, scale_mismatch, total = {}, 0, 0, 0
    for name, w in weights.items():
        if not name.endswith("_proj.weight"):
            result[name] = w
            continue
        x = w.float()
        amax = x.abs().amax(dim=1, keepdim=True)
        s = torch.where(amax > 0, amax / 448.0, torch.ones_like(amax))
        q = (x / s).to(torch.float8_e4m3fn)
        result[name] = q
        result[name[:-len("weight")] + "weight_scale"] = s  # [out, 1] fp32
        mine = ours[name].view(torch.uint8)
        byte_mismatch += int((q.view(torch.uint8) != mine).sum())
        scale_mismatch += int((s != ours[name[:-len("weight")] + "weight_scale"].float()).sum())
        total += q.numel()
    os.makedirs(out, exist_ok=True)
    save(os.path.join(out, "model.safetensors"), result)
    for f in ("config.json", "tokenizer.model", "generation_config.json"):
        if os.path.exists(os.path.join(ours_dir, f)):
            shutil.copy(os.path.join(ours_dir, f), os.path.join(out, f))
    ok = byte_mismatch == 0 and scale_mismatch == 0
    print(f"RESULT torch={torch.__version__} e4m3_bytes_compared={total} "
          f"byte_mismatches={byte_mismatch} scale_mismatches={scale_mismatch} "
          f"status={'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
