#!/usr/bin/env python3
"""Reference fixtures for rope_scaling, from Hugging Face transformers (fp32, CPU).

    /tmp/torchenv/bin/python tests/reference/make_rope_fixtures.py

Each fixture is a committed test model with config.json overrides (stored in the fixture as
"config_overrides"; llama2_reference_test applies the same ones through the engine's config
parser): transformers loads the model from a copy of the folder whose config.json carries them, so
its own rope_scaling parser and LlamaRotaryEmbedding are the reference.

  tiny-mha.rope-linear4.json    {"type": "linear", "factor": 4.0}, max_position_embeddings 128
                                (an original 32-token context stretched x4; prompts + greedy reach
                                84 positions). Linear scaling does not depend on the length, so
                                the entries are make_fixtures.py's.
  tiny-gqa.rope-dynamic2.json   {"type": "dynamic", "factor": 2.0}, max_position_embeddings 42 (x2: an 84-token context):
                                every prompt crosses 42 (during its prompt or its greedy
                                continuation). Dynamic NTK recomputes the base from the sequence
                                length of each forward call, so the logits of a position depend on
                                how the sequence was run, and the fixture stores three runs:
      logits          [T, V]  position p from one forward over ids[0..p] (a prefill of p + 1
                              tokens): the engine's full prefill (last position) and its one-token
                              logprobs requests over prefixes;
      decode_logits   [T, V]  token by token on HF's KV cache (the engine's chunk-1 path);
      chunk5_logits   rows at the ends of chunks of 5 on HF's KV cache, chunk5_positions;
      greedy                  a prefill of the prompt, then one cached token per step (generate()).
                              transformers keeps the largest length it has seen in the module
                              (max_seq_len_cached) across calls; every run here starts from a fresh
                              state (reset_rope), i.e. one sequence on its own, which is what each
                              of the engine's requests gets.
"""
import argparse
import json
import os
import platform
import shutil
import sys
import tempfile

import sentencepiece as spm
import torch
import transformers
from transformers import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402  (run_prompt: the standard entries)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
FIXTURES = [
    ("tiny-mha", "rope-linear4", {"rope_scaling": {"type": "linear", "factor": 4.0},
                                  "max_position_embeddings": 128}),
    ("tiny-gqa", "rope-dynamic2", {"rope_scaling": {"type": "dynamic", "factor": 2.0},
                                   "max_position_embeddings": 42}),
]


def rounded(rows):
    return [[float(f"{v:.8g}") for v in row] for row in rows.tolist()]


def load(model_dir, overrides):
    """LlamaForCausalLM from a copy of model_dir whose config.json carries `overrides`."""
    tmp = tempfile.mkdtemp()
    for f in os.listdir(model_dir):
        os.symlink(os.path.join(os.path.abspath(model_dir), f), os.path.join(tmp, f))
    os.remove(os.path.join(tmp, "config.json"))
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    cfg.update(overrides)
    json.dump(cfg, open(os.path.join(tmp, "config.json"), "w"))
    model = LlamaForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
    shutil.rmtree(tmp)
    model.eval()
    rot = model.model.rotary_emb
    want = overrides["rope_scaling"]["type"]
    if rot.rope_type != want:
        sys.exit(f"transformers did not take rope_scaling {want} (rope_type {rot.rope_type})")
    return model


def reset_rope(model):
    """A fresh dynamic state: the inverse frequencies of the original length."""
    rot = model.model.rotary_emb
    rot.inv_freq = rot.original_inv_freq.clone()
    rot.max_seq_len_cached = rot.original_max_seq_len


@torch.no_grad()
def cached_run(model, ids, chunk):
    """Logits at each chunk end, running `ids` in chunks on one KV cache."""
    reset_rope(model)
    past, rows, positions = None, [], []
    for start in range(0, len(ids), chunk):
        part = ids[start:start + chunk]
        out = model(torch.tensor([part]), past_key_values=past, use_cache=True,
                    position_ids=torch.arange(start, start + len(part))[None])
        past = out.past_key_values
        rows.append(out.logits[0, -1].float())
        positions.append(start + len(part) - 1)
    return torch.stack(rows), positions


@torch.no_grad()
def dynamic_entry(model, ids):
    entry = {}
    prefix_rows = []
    reset_rope(model)
    for p in range(len(ids)):  # increasing lengths: the module's state only grows
        prefix_rows.append(model(torch.tensor([ids[:p + 1]])).logits[0, -1].float())
    entry["logits"] = rounded(torch.stack(prefix_rows))
    entry["decode_logits"] = rounded(cached_run(model, ids, 1)[0])
    rows, positions = cached_run(model, ids, 5)
    entry["chunk5_logits"], entry["chunk5_positions"] = rounded(rows), positions
    reset_rope(model)
    out = model(torch.tensor([ids]), use_cache=True)
    past, last, seq = out.past_key_values, out.logits[0, -1].float(), list(ids)
    greedy, margins = [], []
    for _ in range(make_fixtures.GREEDY_STEPS):
        top2 = torch.topk(last, 2).values
        tok = int(torch.argmax(last))
        greedy.append(tok)
        margins.append(float(top2[0] - top2[1]))
        seq.append(tok)
        out = model(torch.tensor([[tok]]), past_key_values=past, use_cache=True,
                    position_ids=torch.tensor([[len(seq) - 1]]))
        past, last = out.past_key_values, out.logits[0, -1].float()
    entry["greedy"], entry["greedy_top2_margin"] = greedy, margins
    if len(ids) + len(greedy) <= model.config.max_position_embeddings:
        sys.exit(f"prompt of {len(ids)} ids never passes max_position_embeddings")
    return entry


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=ROOT)
    args = ap.parse_args()
    torch.manual_seed(0)
    models = os.path.join(args.root, "tests", "models")
    out_dir = os.path.join(args.root, "tests", "reference", "fixtures", "rope")
    os.makedirs(out_dir, exist_ok=True)
    prompts = json.load(open(os.path.join(args.root, "tests", "reference", "prompts.json")))
    for name, tag, overrides in FIXTURES:
        model = load(os.path.join(models, name), overrides)
        sp = spm.SentencePieceProcessor(model_file=os.path.join(models, name, "tokenizer.model"))
        dynamic = overrides["rope_scaling"]["type"] == "dynamic"
        entries = []
        for p in prompts:
            ids = [sp.bos_id()] + sp.encode(p["text"]) if "text" in p else list(p["ids"])
            entry = {"name": p["name"], "text": p.get("text"), "prompt_ids": ids}
            if dynamic:
                entry.update(dynamic_entry(model, ids))
            else:
                logits, greedy, margins = make_fixtures.run_prompt(model, ids, None, "cpu", False)
                entry.update({"logits": logits, "greedy": greedy, "greedy_top2_margin": margins})
            entries.append(entry)
            print(f"{name}.{tag}/{p['name']}: {len(ids)} ids, greedy {entry['greedy'][:6]}...",
                  flush=True)
        generator = {"script": "tests/reference/make_rope_fixtures.py", "torch": torch.__version__,
                     "transformers": transformers.__version__, "sentencepiece": spm.__version__,
                     "python": platform.python_version(), "dtype": "float32", "device": "cpu",
                     "attn_implementation": "eager"}
        out = {"model": name, "config_overrides": overrides, "generator": generator,
               "prompts": entries}
        with open(os.path.join(out_dir, f"{name}.{tag}.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False)
        print(f"wrote {name}.{tag}.json", flush=True)


if __name__ == "__main__":
    main()
