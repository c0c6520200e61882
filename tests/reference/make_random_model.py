#!/usr/bin/env python3
"""Writes a random Llama-2-shaped Hugging Face checkpoint for GPU checks at realistic sizes.

    python3 tests/reference/make_random_model.py --out /tmp/random-fp16 [--dtype float16|bfloat16]
        [--seed 0] [--tokenizer tests/models/small-d64/tokenizer.model]

The test models in tests/models have a 512-word vocabulary and 2-3 layers; this one has the
Llama-2 vocabulary (32000), 8 layers and head_dim 64, so the vocab-parallel logits, the
vocabulary-sized sampling and error growth over depth are exercised (~155M parameters, ~310 MB).
Weights come from transformers' own initialisation under torch.manual_seed(seed), made in fp32 and
rounded once to --dtype, so the float16 and bfloat16 models of one seed are roundings of the same
fp32 weights. The tokenizer is copied from a test model: it has fewer pieces than 32000, which the
engine accepts (ids beyond the tokenizer decode as <unk>).
"""
import argparse
import inspect
import json
import os
import shutil
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
ROPE_THETA = 10000.0


def make_config():
    kwargs = dict(vocab_size=32000, hidden_size=1024, intermediate_size=2816, num_hidden_layers=8,
                  num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=2048,
                  rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                  tie_word_embeddings=False, attention_bias=False, mlp_bias=False)
    # transformers >= 5 keeps theta in rope_parameters; older versions take a top-level rope_theta.
    if "rope_parameters" in inspect.signature(LlamaConfig.__init__).parameters:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": ROPE_THETA}
    else:
        kwargs["rope_theta"] = ROPE_THETA
    return LlamaConfig(**kwargs)


def save(model, out):
    # transformers 5 only writes safetensors and removed the safe_serialization argument.
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        model.save_pretrained(out, safe_serialization=True)
    else:
        model.save_pretrained(out)


def fix_config_json(path, dtype_name):
    """Makes config.json say what the engine's parse_model_config reads, whatever the version."""
    with open(path, encoding="utf-8") as f:
        cfg = json.load(f)
    # The engine picks the compute dtype for --dtype auto from torch_dtype (newer transformers
    # write "dtype" instead); tie_word_embeddings decides whether lm_head.weight must exist.
    cfg["torch_dtype"] = dtype_name
    if "dtype" in cfg:
        cfg["dtype"] = dtype_name
    cfg["tie_word_embeddings"] = False
    cfg["rope_theta"] = ROPE_THETA
    cfg.setdefault("hidden_act", "silu")
    expected = {"hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
                "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
                "max_position_embeddings": 2048, "bos_token_id": 1, "eos_token_id": 2}
    wrong = {k: cfg.get(k) for k, v in expected.items() if cfg.get(k) != v}
    if wrong:
        sys.exit(f"{path}: unexpected values {wrong} (expected {expected})")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="model directory to write")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float16")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tokenizer", default=os.path.join(here, "..", "models", "small-d64", "tokenizer.model"))
    args = ap.parse_args()
    if not os.path.isfile(args.tokenizer):
        sys.exit(f"--tokenizer {args.tokenizer}: no such file")

    torch.manual_seed(args.seed)
    model = LlamaForCausalLM(make_config())  # fp32, initialised by transformers
    w = model.model.layers[0].self_attn.q_proj.weight
    if not torch.isfinite(w).all() or float(w.std()) == 0.0:
        sys.exit("transformers left the weights uninitialised")
    model = model.to(DTYPES[args.dtype]).eval()

    os.makedirs(args.out, exist_ok=True)
    save(model, args.out)
    fix_config_json(os.path.join(args.out, "config.json"), args.dtype)
    shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.model"))
    n = sum(p.numel() for p in model.parameters())
    print(f"wrote {args.out}: {n / 1e6:.1f}M parameters in {args.dtype}, seed {args.seed}", flush=True)


if __name__ == "__main__":
    main()
