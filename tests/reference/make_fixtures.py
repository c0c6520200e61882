#!/usr/bin/env python3
"""Reference fixtures from the official implementation (Hugging Face transformers).

Run on a machine with torch + transformers + sentencepiece (the GPU nodes; no GPU is needed for the
default CPU fp32 fixtures):

    python3 tests/reference/make_fixtures.py --models tests/models --out tests/reference/fixtures

For every model directory under --models (or only those named by --only) it loads LlamaForCausalLM
from the project's own files, tokenizes the prompts in prompts.json with the directory's
tokenizer.model through the sentencepiece Python package, and writes <model>.json with, per prompt:
  - prompt_ids: the token ids (BOS first). Fixtures are keyed by ids, so the C++ side does not depend
    on the SentencePiece version that made them;
  - logits: fp32 logits at every prompt position (last position = the next-token distribution).
    For a vocabulary >= LARGE_VOCAB only the last position is stored and "logit_positions" lists the
    stored positions (row i of "logits" is position logit_positions[i]): all positions of a
    32000-word vocabulary would make a fixture of tens of MB;
  - greedy: 32 greedy continuation ids (argmax, EOS not treated specially), and the top-2 logit
    margin at each step so near-ties can be told apart from real mismatches.
By default the computation is fp32 on the CPU with eager attention, whatever dtype the files hold
(bf16/fp16 weights are upcast exactly), because the C++ CPU backend is an fp32 oracle.

--dtype float16|bfloat16 --device cuda makes the fixtures the CUDA backend is compared with in that
dtype (tests/reference/gpu_check.sh): HF itself then rounds weights and activations to the dtype, so
the fixture carries the same kind of rounding as the engine, and its distance from the fp32 fixture
measures the dtype's own noise. On cuda, TF32 and reduced-precision (fp16/bf16-accumulated) GEMM
reductions are switched off: the reference should round only where the dtype forces it to.

--kv-cache-dtype fp8_e4m3 (with float16/bfloat16) is the reference for the engine's fp8 KV cache:
every key and value HF caches is rounded to torch.float8_e4m3fn and back to the dtype before
attention uses it (transformers has no fp8 cache of its own; the rounding is applied where its
DynamicCache stores the states, so a full forward attends over the rounded K/V too).

--weight-dtype fp8_e4m3|int8 --tp N is the reference for the engine's
quantized projections (kernels/quant.cuh): every q/k/v/o/gate/up/down weight is quantized per output
row exactly as the engine does (s = max|row| / 448 or 127; e4m3 round-to-nearest-even, or int8
round-half-even clamped to +-127) and used dequantized in fp32; o_proj and down_proj are quantized
per row of each rank's column shard (the engine's ranks each quantize their own shard, so the
reference depends on --tp). The product is computed in fp32 and rounded to the dtype, as the
engine's kernels do. With --dtype float32 (which the engine does not quantize) it gives that
configuration's fp32 baseline: the distance of the float16 fixture from it is the dtype's own noise
under the same quantization, the tolerance gpu_check.sh uses.

fp8 quantizes a projection's input too, per token (per token and shard for o/down), only when the
call has more rows than --gemv-rows (default 1, the engine's LLAMA2_GEMV default): the engine runs
products of up to LLAMA2_GEMV rows as a W8A16 GEMV (activations stay in the dtype: the GEMV is
bound by reading the weights, fp8 activations would buy nothing there) and larger ones as W8A8 on
the FP8 tensor cores (src/rank/cuda/linear.h). A call's rows are the tokens of that forward. So
the prompt's logits come from one forward over the whole prompt (T rows: quantized when T > 1),
the engine's one-step prefill; and with --weight-dtype the greedy continuation is decoded with
HF's KV cache, one row per step (not quantized), as the engine decodes, instead of a full forward
over prompt + continuation per step (whose rows would all be quantized). Without --weight-dtype the
greedy steps stay full forwards (the committed fixtures were made that way; the numbers are the
same up to summation order). tests/reference/README.md lists the engine paths of
llama2_reference_test that split the rows differently from this (token-by-token decode, ...) and
why its tolerance covers them.
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
# From this vocabulary size on, only the last prompt position's logits are stored (see above).
LARGE_VOCAB = 4096
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def configure_cuda():
    # fp32 on cuda must be real fp32 (TF32 keeps 10 mantissa bits: ~1e-3 relative error), and the
    # half-precision GEMMs must accumulate in fp32 like the engine's cuBLAS calls do.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        if hasattr(torch.backends.cuda.matmul, flag):
            setattr(torch.backends.cuda.matmul, flag, False)


def round_kv_to_fp8():
    """Round every K/V state to e4m3 as the cache stores it; returns a call counter to prove that
    the hook ran (a transformers version that bypasses DynamicCache.update must fail loudly)."""
    from transformers.cache_utils import DynamicCache
    calls = [0]
    update = DynamicCache.update

    def rounded(self, key_states, value_states, *args, **kwargs):
        calls[0] += 1
        # Values beyond +-448 would overflow to NaN in torch's cast; the engine saturates.
        k = key_states.clamp(-448, 448).to(torch.float8_e4m3fn).to(key_states.dtype)
        v = value_states.clamp(-448, 448).to(torch.float8_e4m3fn).to(value_states.dtype)
        return update(self, k, v, *args, **kwargs)

    DynamicCache.update = rounded
    return calls


def quantize_rows(w, fp8):
    """w [N, K] fp32 -> the dequantized per-row quantization the engine stores (fp32)."""
    amax = w.abs().amax(dim=-1, keepdim=True)
    s = torch.where(amax > 0, amax / (448.0 if fp8 else 127.0), torch.ones_like(amax))
    v = w / s
    q = v.to(torch.float8_e4m3fn).float() if fp8 else torch.round(v).clamp(-127, 127)
    return q * s


def quantize_projections(model, weight_dtype, tp, gemv_rows):
    """Replaces each projection's forward by the engine's quantized product (see above)."""
    fp8 = weight_dtype == "fp8_e4m3"
    count = 0
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        for lin, split in ((a.q_proj, 1), (a.k_proj, 1), (a.v_proj, 1), (a.o_proj, tp),
                           (m.gate_proj, 1), (m.up_proj, 1), (m.down_proj, tp)):
            w = lin.weight.data.float()
            if w.shape[1] % split:
                sys.exit(f"--tp {tp} does not divide the {w.shape[1]} input columns of a projection")
            wq = torch.cat([quantize_rows(c, fp8) for c in w.chunk(split, dim=1)], dim=1)

            def forward(x, wq=wq, split=split):
                xf = x.float()
                rows = xf.numel() // xf.shape[-1]
                # W8A8 only above the engine's GEMV rows; per token and shard, as each rank
                # quantizes its own activations.
                if fp8 and rows > gemv_rows:
                    xf = torch.cat([quantize_rows(c, True) for c in xf.chunk(split, dim=-1)], dim=-1)
                return torch.nn.functional.linear(xf, wq).to(x.dtype)

            lin.forward = forward
            count += 1
    return count


def load_model(model_dir, dtype, device):
    model, info = LlamaForCausalLM.from_pretrained(
        model_dir, dtype=dtype, attn_implementation="eager", output_loading_info=True)
    missing = [k for k in info.get("missing_keys", []) if k != "lm_head.weight" or not model.config.tie_word_embeddings]
    if missing or info.get("unexpected_keys") or info.get("mismatched_keys"):
        sys.exit(f"{model_dir}: loading info not clean: {info}")
    model.to(device)
    model.eval()
    return model


@torch.no_grad()
def run_prompt(model, ids, positions, device, cached):
    """Logits at `positions` (None: all), greedy ids and top-2 margins for one prompt. cached:
    greedy steps decode one token at a time on the prompt's KV cache (the engine's row split)."""
    x = torch.tensor([ids], dtype=torch.long, device=device)
    out = model(x, use_cache=True) if cached else model(x)
    all_logits = out.logits[0].float()  # [T, V]
    past = out.past_key_values if cached else None
    logits = all_logits.cpu()
    if positions is not None:
        logits = logits[positions]
    seq = list(ids)
    greedy, margins = [], []
    for step in range(GREEDY_STEPS):
        if not cached:
            last = model(torch.tensor([seq], dtype=torch.long, device=device)).logits[0, -1].float()
        elif step == 0:
            last = all_logits[-1]
        else:
            out = model(torch.tensor([[seq[-1]]], dtype=torch.long, device=device),
                        past_key_values=past, use_cache=True)
            past = out.past_key_values
            last = out.logits[0, -1].float()
        top2 = torch.topk(last, 2).values
        tok = int(torch.argmax(last))
        greedy.append(tok)
        margins.append(float(top2[0] - top2[1]))
        seq.append(tok)
    # 8 significant digits: far below the 1e-4 tolerance, half the file size of repr().
    rounded = [[float(f"{v:.8g}") for v in row] for row in logits.tolist()]
    return rounded, greedy, margins


def model_names(models_dir, only):
    def plain(n):  # 4-bit folders get their fixtures from make_int4_packer_fixtures.py
        return "quantization_config" not in json.load(open(os.path.join(models_dir, n, "config.json")))
    names = [n for n in sorted(os.listdir(models_dir))
             if os.path.isfile(os.path.join(models_dir, n, "config.json")) and plain(n)]
    if only is None:
        return names
    wanted = [n for n in only.split(",") if n]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        sys.exit(f"--only: no model directory {unknown} under {models_dir} (found {names})")
    return [n for n in names if n in wanted]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", required=True, help="directory holding one model directory per fixture")
    ap.add_argument("--prompts", default=os.path.join(os.path.dirname(__file__), "prompts.json"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="float32",
                    help="dtype HF computes in (weights are converted to it on load)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--only", help="comma-separated model directory names to include (default: all)")
    ap.add_argument("--kv-cache-dtype", choices=["auto", "fp8_e4m3"], default="auto",
                    help="fp8_e4m3: round cached keys and values to e4m3 (float16/bfloat16 only)")
    ap.add_argument("--weight-dtype", choices=["auto", "fp8_e4m3", "int8"], default="auto",
                    help="quantize the projections as the engine's --weight-dtype does")
    ap.add_argument("--tp", type=int, default=1,
                    help="with --weight-dtype: the engine's tensor-parallel degree (o/down shards)")
    ap.add_argument("--gemv-rows", type=int, default=1,
                    help="with --weight-dtype fp8: the engine's LLAMA2_GEMV (calls of up to this "
                         "many rows keep their activations in the dtype)")
    args = ap.parse_args()
    fp8_calls = None
    if args.kv_cache_dtype == "fp8_e4m3":
        if args.dtype == "float32":
            sys.exit("--kv-cache-dtype fp8_e4m3 needs --dtype float16 or bfloat16")
        fp8_calls = round_kv_to_fp8()
    torch.manual_seed(0)
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    if args.device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("--device cuda: torch sees no CUDA device")
        configure_cuda()
    prompts = json.load(open(args.prompts, encoding="utf-8"))
    os.makedirs(args.out, exist_ok=True)
    for name in model_names(args.models, args.only):
        model_dir = os.path.join(args.models, name)
        model = load_model(model_dir, DTYPES[args.dtype], args.device)
        quantized = args.weight_dtype != "auto"
        if quantized and quantize_projections(model, args.weight_dtype, args.tp, args.gemv_rows) == 0:
            sys.exit("--weight-dtype: no projection was replaced")
        vocab = model.config.vocab_size
        sp = spm.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
        entries = []
        for p in prompts:
            if "text" in p:
                ids = [sp.bos_id()] + sp.encode(p["text"])
            else:
                ids = [i % vocab for i in p["ids"]]
            positions = [len(ids) - 1] if vocab >= LARGE_VOCAB else None
            logits, greedy, margins = run_prompt(model, ids, positions, args.device, quantized)
            if fp8_calls is not None and fp8_calls[0] == 0:
                sys.exit("--kv-cache-dtype fp8_e4m3: DynamicCache.update was never called")
            entry = {"name": p["name"], "text": p.get("text"), "prompt_ids": ids}
            if positions is not None:
                entry["logit_positions"] = positions
            entry.update({"logits": logits, "greedy": greedy, "greedy_top2_margin": margins})
            entries.append(entry)
            print(f"{name}/{p['name']}: {len(ids)} prompt ids, greedy {greedy[:8]}..., "
                  f"min top-2 margin {min(margins):.4g}", flush=True)
        generator = {
            "script": "tests/reference/make_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "sentencepiece": spm.__version__,
            "python": platform.python_version(), "dtype": args.dtype, "device": args.device,
            "attn_implementation": "eager", "kv_cache_dtype": args.kv_cache_dtype,
            "weight_dtype": args.weight_dtype, "tp": args.tp, "gemv_rows": args.gemv_rows,
            "greedy_decode": "kv_cache" if quantized else "full_forward"}
        if args.device == "cuda":
            generator.update({"cuda_device": torch.cuda.get_device_name(), "tf32": False,
                              "reduced_precision_reduction": False})
        out = {"model": name, "generator": generator, "prompts": entries}
        with open(os.path.join(args.out, f"{name}.json"), "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=False)
        print(f"wrote {name}.json", flush=True)
        del model
        if args.device == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
