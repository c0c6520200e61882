#!/usr/bin/env python3
"""Hugging Face fixtures for 4-bit checkpoints: transformers on the weights that the reference
dequantizer (dequantize_int4.py, numpy, the formats' published formulas) reads out of the 4-bit
files, so that the engine's CPU backend, reading the 4-bit files itself, is held to fp32 precision
against the official implementation.

    /tmp/torchenv/bin/python tests/reference/make_int4_fixtures.py --llama2 build/llama2

The 4-bit test models are made, here and by tests/integration/int4_checkpoint.sh at test time,
with the same deterministic commands (RECIPES): `llama2 make-test-model` (hidden 512, 8 heads of
64, 4 KV heads, intermediate 1024, 2 layers, f16; weights fixed by the seed) and `llama2 quantize`
(round-to-nearest). Its dimensions keep whole groups of 128 at TP 1, 2 and 4 (o_proj's 512 input
columns, down_proj's 1024). Fixtures: tests/reference/fixtures/int4/<name>.json, in
make_fixtures.py's format (two prompts, all positions).
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import dequantize_int4  # noqa: E402
import make_fixtures  # noqa: E402

SOURCE = ["make-test-model", "--hidden-size", "512", "--intermediate-size", "1024", "--layers",
          "2", "--heads", "8", "--kv-heads", "4", "--vocab", "512", "--dtype", "f16",
          "--tokenizer", "tests/models/tiny-gqa/tokenizer.model"]
RECIPES = {
    "int4-awq": ["--format", "awq", "--group-size", "128"],
    "int4-gptq-act-order": ["--format", "gptq", "--group-size", "64", "--desc-act",
                            "--checkpoint-format", "gptq_v2"],
}
PROMPTS = ("english", "ids")


def run(cmd):
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def write_fixture(name, q, deq, out_dir, origin):
    """out_dir/name.json: transformers on the fp32 folder deq that dequantize_int4.py makes from the
    4-bit folder q (make_fixtures.py's format, the PROMPTS); origin: how q was made."""
    prompts = [p for p in json.load(open(os.path.join(HERE, "prompts.json"))) if p["name"] in PROMPTS]
    sys.argv = ["dequantize_int4.py", q, deq]
    dequantize_int4.main()
    model = make_fixtures.load_model(deq, torch.float32, "cpu")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(deq, "tokenizer.model"))
    entries = []
    for p in prompts:
        ids = [sp.bos_id()] + sp.encode(p["text"]) if "text" in p else list(p["ids"])
        logits, greedy, margins = make_fixtures.run_prompt(model, ids, None, "cpu", False)
        entries.append({"name": p["name"], "text": p.get("text"), "prompt_ids": ids,
                        "logits": logits, "greedy": greedy, "greedy_top2_margin": margins})
        print(f"{name}/{p['name']}: greedy {greedy[:8]}..., min margin {min(margins):.4g}")
    generator = {"script": "tests/reference/make_int4_fixtures.py", "torch": torch.__version__,
                 "transformers": transformers.__version__, "python": platform.python_version(),
                 **origin, "dequantizer": "tests/reference/dequantize_int4.py", "dtype": "float32"}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
        json.dump({"model": name, "generator": generator, "prompts": entries}, f, ensure_ascii=False)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama2", required=True, help="the llama2 binary (build/llama2)")
    args = ap.parse_args()
    llama2 = os.path.abspath(args.llama2)
    out_dir = os.path.join(ROOT, "tests", "reference", "fixtures", "int4")
    tmp = tempfile.mkdtemp()
    src = os.path.join(tmp, "src")
    run([llama2] + SOURCE[:1] + ["--out", src] + SOURCE[1:])
    torch.set_num_threads(2)
    for name, recipe in RECIPES.items():
        q = os.path.join(tmp, name)
        run([llama2, "quantize", "--model", src, "--out", q] + recipe)
        write_fixture(name, q, os.path.join(tmp, name + "-deq"), out_dir,
                      {"source": ["llama2"] + SOURCE, "quantize": ["llama2", "quantize"] + recipe})


if __name__ == "__main__":
    main()
