#!/usr/bin/env python3
"""How often a draft model's greedy token equals its target's, on held-out text: the per-token
acceptance rate that greedy speculative decoding with this draft can expect (issue 39), measured
without the engine, with train.py's model code (LlamaForCausalLM's computation) in fp32.

    python3 training/draft_agreement.py --target models/docs-8m --draft models/docs-draft \
        --data training/corpus --windows 32

Both models read the same fixed windows of heldout.bin (evenly spaced, as train.py's held-out
loss); at every position the draft's argmax is compared with the target's. Also printed: the
expected number of tokens per verify step for K proposals if acceptances were independent with
that rate a, 1 + a + ... + a^K, and each model's mean loss on the windows.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

from train import Llama

KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta",
        "tie_word_embeddings")


def load(model_dir):
    c = json.load(open(os.path.join(model_dir, "config.json")))
    model = Llama({k: c.get(k, False) for k in KEYS})
    tensors = {k: v.float() for k, v in load_file(os.path.join(model_dir, "model.safetensors")).items()}
    own = model.hf_state_dict()
    assert set(own) == set(tensors), (model_dir, set(own) ^ set(tensors))
    with torch.no_grad():
        for name, p in own.items():
            p.copy_(tensors[name])
    return model.eval()


@torch.no_grad()
def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--draft", required=True)
    ap.add_argument("--data", required=True, help="folder with heldout.bin (build_corpus.py)")
    ap.add_argument("--windows", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    target, draft = load(args.target), load(args.draft)
    data = np.fromfile(os.path.join(args.data, "heldout.bin"), dtype=np.uint16)
    starts = np.linspace(0, len(data) - args.seq - 2, args.windows).astype(np.int64)
    same = total = 0
    loss = {"target": 0.0, "draft": 0.0}
    for s in starts:
        x = torch.from_numpy(data[s:s + args.seq + 1].astype(np.int64))[None]
        lt, ld = target(x[:, :-1])[0], draft(x[:, :-1])[0]
        same += int((lt.argmax(-1) == ld.argmax(-1)).sum())
        total += lt.shape[0]
        loss["target"] += F.cross_entropy(lt, x[0, 1:]).item() / len(starts)
        loss["draft"] += F.cross_entropy(ld, x[0, 1:]).item() / len(starts)
    a = same / total
    print(json.dumps({"positions": total, "greedy_agreement": round(a, 4),
                      "mean_loss": {k: round(v, 4) for k, v in loss.items()},
                      "tokens_per_verify_if_independent": {
                          k: round(sum(a ** i for i in range(k + 1)), 3) for k in (2, 4, 8)}}))


if __name__ == "__main__":
    main()
