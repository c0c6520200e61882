#!/usr/bin/env python3
"""Reference fixtures from the official implementation (Hugging Face transformers).

Run on a machine with torch + transformers + sentencepiece (the GPU nodes; no GPU is needed):

    python3 tests/reference/make_fixtures.py --models tests/models --out tests/reference/fixtures

For every model directory under --models it loads LlamaForCausalLM from the project's own files,
tokenizes the prompts in prompts.json with the directory's tokenizer.model through the sentencepiece
Python package, and writes <model>.json with, per prompt:
  - prompt_ids: the token ids (BOS first). Fixtures are keyed by ids, so the C++ side does not depend
    on the SentencePiece version that made them;
  - logits: fp32 logits at every prompt position (last position = the next-token distribution);
  - greedy: 32 greedy continuation ids (argmax, EOS not treated specially), and the top-2 logit
    margin at each step so near-ties can be told apart from real mismatches.
The computation is fp32 on the CPU with eager attention, whatever dtype the files hold (bf16/fp16
weights are upcast exactly), because the C++ CPU backend is an fp32 oracle; TF32 is irrelevant.
"""
import argparse
import json
import os
import platform
import sys

import sentencepiece as spm
import torch
import transformers
from transformers import LlamaForCausalLM

GREEDY_STEPS = 32


def load_model(model_dir):
    model, info = LlamaForCausalLM.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="eager", output_loading_info=True)
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight" or not model.config.tie_word_embeddings]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        sys.exit(f"{model_dir}: loading info not clean: {info}")
    model.eval()
    return model


@torch.no_grad()
def run_prompt(model, ids):
    x = torch.tensor([ids], dtype=torch.long)
    logits = model(x).logits[0].float()  # [T, V]
    seq = list(ids)
    greedy, margins = [], []
    for _ in range(GREEDY_STEPS):
        last = model(torch.tensor([seq], dtype=torch.long)).logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        tok = int(torch.argmax(last))
        greedy.append(tok)
        margins.append(float(top2[0] - top2[1]))
        seq.append(tok)
    # 8 significant digits: far below the 1e-4 tolerance, half the file size of repr().
    rounded = [[float(f"{v:.8g}") for v in row] for row in logits.tolist()]
    return rounded, greedy, margins


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="directory holding one model directory per fixture")
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.json"))
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    prompts = json.load(open(args.prompts, encoding="utf-8"))
    os.makedirs(args.out, exist_ok=True)
    for name in sorted(os.listdir(args.models)):
        model_dir = os.path.join(args.models, name)
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            continue
        model = load_model(model_dir)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
        entries = []
        for p in prompts:
            if "text" in p:
                ids = [sp.bos_id()] + sp.encode(p["text"])
            else:
                ids = [i % model.config.vocab_size for i in p["ids"]]
            logits, greedy, margins = run_prompt(model, ids)
            entries.append({"name": p["name"], "text": p.get("text"), "prompt_ids": ids,
                            "logits": logits, "greedy": greedy, "greedy_top2_margin": margins})
            print(f"{name}/{p['name']}: {len(ids)} prompt ids, greedy {greedy[:8]}..., "
                  f"min top-2 margin {min(margins):.4g}", flush=True)
        out = {"model": name, "generator": {
            "script": "tests/reference/make_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "sentencepiece": spm.__version__,
            "python": platform.python_version(), "dtype": "float32", "device": "cpu",
            "attn_implementation": "eager"}, "prompts": entries}
        with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False)
        print(f"wrote {name}.json", flush=True)


if __name__ == "__main__":
    main()
