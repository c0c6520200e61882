#!/usr/bin/env python3
"""Writes tests/models/tiny-codellama: CodeLlama's vocabulary (32016 = 32000 + 16 infilling tokens)
and rope_theta 1000000 on a tiny body (hidden 16, 4 heads of 4, 2 KV heads, 2 layers), so the
32016-row embedding and LM head are split over 1, 2 and 4 ranks end to end on the CPU.

    /tmp/torchenv/bin/python tests/reference/make_codellama_model.py
    /tmp/torchenv/bin/python tests/reference/make_fixtures.py --models tests/models \\
        --only tiny-codellama --out tests/reference/fixtures

Weights are transformers' own initialisation under torch.manual_seed(0), with initializer_range
0.3 (instead of 0.02) so that greedy top-2 margins over 32016 logits stay far above fp32 noise,
saved in bf16 (2 MB). The tokenizer is tiny-gqa's (512 pieces; ids beyond it decode as <unk>).
"""
import json
import os
import shutil

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def main():
    out = os.path.join(ROOT, "tests", "models", "tiny-codellama")
    cfg = LlamaConfig(vocab_size=32016, hidden_size=16, intermediate_size=40, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384,
                      rms_norm_eps=1e-5, hidden_act="silu", bos_token_id=1, eos_token_id=2,
                      tie_word_embeddings=False, initializer_range=0.3,
                      rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    path = os.path.join(out, "config.json")
    c = json.load(open(path))
    # What the engine's parser reads whatever the transformers version (as make_random_model.py).
    c.update({"torch_dtype": "bfloat16", "rope_theta": 1000000.0, "tie_word_embeddings": False})
    c.pop("dtype", None)
    json.dump(c, open(path, "w"), indent=2, sort_keys=True)
    shutil.copyfile(os.path.join(ROOT, "tests", "models", "tiny-gqa", "tokenizer.model"),
                    os.path.join(out, "tokenizer.model"))
    print(f"wrote {out}: {sum(p.numel() for p in model.parameters())} parameters, bf16")


if __name__ == "__main__":
    main()
