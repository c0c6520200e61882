#!/usr/bin/env python3
"""The reference for `llama2 perplexity`: the same definition computed with Hugging Face
transformers (LlamaForCausalLM, eager attention) and sentencepiece.

    python3 tests/reference/perplexity_reference.py --model models/docs-8m \
        --text-file tests/reference/perplexity/heldout-excerpt.txt --context 128 --stride 64

Definition (docs/cli.md, `llama2 perplexity`): the file is tokenized once with one BOS first (n tokens).
Window k is tokens [kS, min(kS + N, n)), run as its own sequence (positions from 0); it scores the
tokens at positions p >= max(kS + 1, (k - 1)S + N) (k = 0: p >= 1), each as -log softmax(logits at
p - 1)[token p]; windows stop after the first that reaches the end. Mean NLL = sum / count, and
perplexity = exp(mean NLL). With S < N every token after the first is scored exactly once; with
S = N (the default) the first token of each later window has no context inside it and is skipped.

--out FILE appends one JSON object per (context, stride) to a fixture list (see --config); with
--config given several times, each "N:S" pair is computed (N = "max" is the model's context).
"""
import argparse
import json
import math
import os
import platform
import sys
import time

import sentencepiece as spm
import torch
import transformers
from transformers import LlamaForCausalLM

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def windows(n, context, stride):
    k = 0
    while True:
        begin, end = k * stride, min(k * stride + context, n)
        prev_end = 0 if k == 0 else (k - 1) * stride + context
        yield begin, end, max(begin + 1, prev_end)
        if end >= n:
            return
        k += 1


@torch.no_grad()
def perplexity(model, ids, context, stride, device):
    total, count, n_windows = 0.0, 0, 0
    for begin, end, first in windows(len(ids), context, stride):
        x = torch.tensor([ids[begin:end]], dtype=torch.long, device=device)
        logp = torch.log_softmax(model(x).logits[0].double(), dim=-1)  # [end - begin, V]
        rows = torch.arange(first - 1 - begin, end - 1 - begin)  # row p - 1 - begin predicts p
        targets = torch.tensor(ids[first:end], dtype=torch.long)
        total -= float(logp.cpu()[rows, targets].sum())
        count += end - first
        n_windows += 1
    return total / count, count, n_windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--text-file", required=True)
    ap.add_argument("--config", action="append", help="N:S (N may be 'max'); default max:max")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--out", help="write a JSON fixture with every configuration's result")
    args = ap.parse_args()
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    model = LlamaForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype],
                                             attn_implementation="eager").to(args.device).eval()
    sp = spm.SentencePieceProcessor(model_file=os.path.join(args.model, "tokenizer.model"))
    with open(args.text_file, encoding="utf-8") as f:
        text = f.read()
    ids = [sp.bos_id()] + sp.encode(text)
    max_pos = model.config.max_position_embeddings
    results = []
    for cfg in args.config or ["max:max"]:
        n_s, s_s = cfg.split(":")
        context = max_pos if n_s == "max" else int(n_s)
        stride = context if s_s == "max" else int(s_s)
        if not (2 <= context <= max_pos and 1 <= stride <= context):
            sys.exit(f"--config {cfg}: need 2 <= N <= {max_pos} and 1 <= S <= N")
        t0 = time.time()
        nll, count, n_windows = perplexity(model, ids, context, stride, args.device)
        r = {"context": context, "stride": stride, "tokens": len(ids), "evaluated_tokens": count,
             "windows": n_windows, "mean_nll": nll, "perplexity": math.exp(nll),
             "seconds": round(time.time() - t0, 3)}
        results.append(r)
        print(json.dumps(r), flush=True)
    if args.out:
        out = {"model": os.path.basename(os.path.normpath(args.model)),
               "text_file": os.path.basename(args.text_file), "token_ids_sum": sum(ids),
               "generator": {"script": "tests/reference/perplexity_reference.py",
                             "torch": torch.__version__, "transformers": transformers.__version__,
                             "sentencepiece": spm.__version__, "python": platform.python_version(),
                             "dtype": args.dtype, "device": args.device,
                             "attn_implementation": "eager"},
               "results": results}
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
