#!/usr/bin/env python3
"""4-bit checkpoints written by a format's own packer, so that the engine's 4-bit reader is checked
on files it did not write (issue 37): GPTQModel (PyPI `gptqmodel`, the successor of AutoGPTQ, which
also writes AutoAWQ's "gemm" layout) quantizes the 4-bit test model on the CPU with its real GPTQ
and AWQ algorithms and calibration data, and saves them as it saves any model.

    python3 -m venv /tmp/packenv
    /tmp/packenv/bin/pip install -r tests/reference/requirements-packers.txt
    /tmp/packenv/bin/python tests/reference/make_int4_packer_fixtures.py --llama2 build/llama2

writes, for each entry of PACKERS:
  tests/models/NAME/            the packer's folder as it saved it (config.json with its
                                quantization_config, quantize_config.json where it writes one,
                                model.safetensors), plus the source's tokenizer.model; its
                                tokenizer.json / tokenizer_config.json (HF conversions of that
                                file) and quant_log.csv are left out;
  tests/reference/fixtures/NAME.json   transformers on the fp32 weights that dequantize_int4.py
                                reads out of that folder (make_int4_fixtures.write_fixture); ctest
                                reference.NAME.np{1,2,4} holds the engine to it within 1e-4, and
                                cli.int4_checkpoint requires the engine's logits to equal those
                                of dequantize_int4.py's folder exactly.
The source is make_int4_fixtures.py's test model (`llama2 make-test-model`, its SOURCE: hidden 512,
intermediate 1024, 2 layers; groups of 128 stay whole at TP 1, 2 and 4). Calibration: 12 windows of
128 tokens of tests/reference/perplexity/heldout-excerpt.txt under the model's tokenizer (the
weights are random, so any text serves; it only has to be fixed).

Before writing, the script checks the files against the packer's own reading of them: GPTQModel
loads each folder back with its CPU kernel (BACKEND.TORCH) and every projection's dequantized
weight must equal dequantize_int4.py's to fp16 rounding (the packer dequantizes in fp16); the
largest difference is recorded in the fixture's "generator".
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

# GPTQModel sizes its CPU thread pools from this (its default wants more than one core).
os.environ.setdefault("GPTQMODEL_CPU_WORKERS", "2")

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
import torch  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import make_int4_fixtures  # noqa: E402

import gptqmodel  # noqa: E402
from gptqmodel import AWQConfig, BACKEND, GPTQConfig, GPTQModel  # noqa: E402

# name -> the packer's quantization config. GPTQ: asymmetric, act order (desc_act, g_idx), groups of
# 128, GPTQModel's default v1 checkpoint format; AWQ: the "gemm" layout with zero points.
PACKERS = {
    "int4-gptqmodel-gptq": lambda: GPTQConfig(bits=4, group_size=128, desc_act=True, sym=False,
                                              act_group_aware=False),
    "int4-gptqmodel-awq": lambda: AWQConfig(bits=4, group_size=128),
}
KEEP = ("config.json", "quantize_config.json", "generation_config.json", "model.safetensors")
CALIBRATION_WINDOWS, WINDOW = 12, 128


def calibration(tokenizer):
    sp = spm.SentencePieceProcessor(model_file=tokenizer)
    text = open(os.path.join(HERE, "perplexity", "heldout-excerpt.txt"), encoding="utf-8").read()
    ids = [sp.bos_id()] + sp.encode(text)
    assert len(ids) >= CALIBRATION_WINDOWS * WINDOW, len(ids)
    return [{"input_ids": ids[i:i + WINDOW], "attention_mask": [1] * WINDOW}
            for i in range(0, CALIBRATION_WINDOWS * WINDOW, WINDOW)]


def pack(src, out, config, calib):
    cwd = os.getcwd()
    os.chdir(os.path.dirname(out))  # GPTQModel writes its logs/ into the working directory
    try:
        model = GPTQModel.load(src, config, device="cpu", dtype=torch.float16)
        model.quantize(calib, batch_size=1)
        model.save(out)
    finally:
        os.chdir(cwd)


def packer_dequant_diff(qdir, deq):
    """Largest |GPTQModel's own dequantized weight - dequantize_int4.py's| over the projections."""
    model = GPTQModel.load(qdir, device="cpu", backend=BACKEND.TORCH, dtype=torch.float16)
    ours = load_file(os.path.join(deq, "model.safetensors"))
    worst, count = 0.0, 0
    for name, module in model.model.named_modules():
        if not hasattr(module, "dequantize_weight"):
            continue
        theirs = module.dequantize_weight().float().cpu().numpy()  # [in, out]
        mine = ours[name + ".weight"]  # [out, in]
        assert theirs.T.shape == mine.shape, (name, theirs.shape, mine.shape)
        worst = max(worst, float(np.abs(theirs.T - mine).max()))
        scale = float(np.abs(mine).max())
        assert np.allclose(theirs.T, mine, rtol=2e-3, atol=2e-3 * scale), name
        count += 1
    assert count == 14, f"{qdir}: {count} quantized projections read back, expected 14"
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama2", required=True, help="the llama2 binary (build/llama2)")
    ap.add_argument("--work", help="scratch folder (default: a new temporary one); a packed "
                    "folder already in it is reused (packing takes minutes on a CPU)")
    args = ap.parse_args()
    torch.set_num_threads(2)
    tmp = args.work or tempfile.mkdtemp()
    src = os.path.join(tmp, "src")
    source = make_int4_fixtures.SOURCE
    if not os.path.exists(os.path.join(src, "model.safetensors")):
        make_int4_fixtures.run([os.path.abspath(args.llama2)] + source[:1] + ["--out", src] + source[1:])
    calib = calibration(os.path.join(src, "tokenizer.model"))
    for name, config in PACKERS.items():
        q = os.path.join(tmp, name)
        if not os.path.exists(os.path.join(q, "model.safetensors")):
            pack(src, q, config(), calib)
        model_dir = os.path.join(ROOT, "tests", "models", name)
        shutil.rmtree(model_dir, ignore_errors=True)
        os.makedirs(model_dir)
        for f in KEEP + ("tokenizer.model",):
            from_dir = src if f == "tokenizer.model" else q
            if os.path.exists(os.path.join(from_dir, f)):
                shutil.copyfile(os.path.join(from_dir, f), os.path.join(model_dir, f))
        deq = os.path.join(tmp, name + "-deq")
        qc = json.load(open(os.path.join(model_dir, "config.json")))["quantization_config"]
        origin = {"source": ["llama2"] + source,
                  "packer": f"gptqmodel {gptqmodel.__version__}",
                  "packer_config": {k: v for k, v in qc.items() if k != "meta"},
                  "calibration": f"{CALIBRATION_WINDOWS} x {WINDOW} tokens of "
                                 "tests/reference/perplexity/heldout-excerpt.txt"}
        make_int4_fixtures.write_fixture(name, model_dir, deq, os.path.join(HERE, "fixtures"), origin)
        diff = packer_dequant_diff(model_dir, deq)
        print(f"{name}: GPTQModel's own dequantization vs dequantize_int4.py: max |diff| {diff:.3g}")
        path = os.path.join(HERE, "fixtures", name + ".json")
        fixture = json.load(open(path, encoding="utf-8"))
        fixture["generator"]["packer_dequant_max_abs_diff"] = diff
        with open(path, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
