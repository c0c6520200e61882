#!/usr/bin/env python3
"""Trains the project's small Llama models (models/README.md) with PyTorch, on one GPU or the CPU.

    python3 training/train.py --data training/corpus --tokenizer models/docs-8m/tokenizer.model \
        --out models/docs-8m --steps auto --time-budget 210
    python3 training/train.py --config draft --device cpu --threads 2 ...   # models/docs-draft

--config picks the shape: docs-8m (the target model) or draft (its ~2M-parameter speculative-decoding
draft: same tokenizer and vocabulary, see CONFIGS). On the CPU the model computes in fp32 (no
autocast) on --threads threads.

--data holds train.bin / heldout.bin (uint16 ids, training/build_corpus.py --tokenizer). The model
is the Llama architecture exactly as Hugging Face's LlamaForCausalLM computes it (RMSNorm, RoPE with
rotate_half, grouped-query attention, SwiGLU, untied LM head) and is saved in its layout:
config.json, generation_config.json, model.safetensors (fp16), tokenizer.model, plus
training_log.json (every logged step, the held-out evaluations, the settings) and loss_curve.png.

Reproducibility: one seed for the weights and the batch order, torch's deterministic algorithms
(CUBLAS_WORKSPACE_CONFIG set before CUDA starts), no TF32, attention written out with matmul and
softmax (no fused kernels whose backward accumulates with atomics). --steps auto measures the step
time on the first steps and fixes the step count that fits --time-budget; the count is logged, and
`--steps N` with it repeats the run step for step. bf16 autocast, fp32 master weights.
"""
import os

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import struct  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

CONFIG = {  # Llama-2's conventions at ~7.9M parameters; head_dim 64, TP 1/2/4 (KV heads replicate)
    "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 8,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 4096,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False,
}
# The draft keeps what the engine needs to run it wherever docs-8m runs: head_dim 64 (the CUDA
# kernels take 64 or 128) and 4 query heads (TP 4 needs num_attention_heads % 4 == 0), hence
# hidden 256. The 4096 x 256 embedding alone is 1.05M parameters, so the LM head shares it (tied)
# and the depth is 2 layers with a narrower MLP: 2.03M parameters, a quarter of docs-8m.
DRAFT = dict(CONFIG, intermediate_size=384, num_hidden_layers=2, tie_word_embeddings=True)
CONFIGS = {"docs-8m": CONFIG, "draft": DRAFT}


class Llama(torch.nn.Module):
    """LlamaForCausalLM's computation with its parameter names."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        H, F_, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
        self.nh, self.nkv = c["num_attention_heads"], c["num_key_value_heads"]
        self.d = H // self.nh
        lin = lambda i, o: torch.nn.Linear(i, o, bias=False)  # noqa: E731
        self.embed_tokens = torch.nn.Embedding(V, H)
        self.layers = torch.nn.ModuleList()
        for _ in range(c["num_hidden_layers"]):
            layer = torch.nn.Module()
            layer.input_layernorm = torch.nn.Parameter(torch.ones(H))
            layer.q_proj, layer.k_proj = lin(H, self.nh * self.d), lin(H, self.nkv * self.d)
            layer.v_proj, layer.o_proj = lin(H, self.nkv * self.d), lin(self.nh * self.d, H)
            layer.post_attention_layernorm = torch.nn.Parameter(torch.ones(H))
            layer.gate_proj, layer.up_proj, layer.down_proj = lin(H, F_), lin(H, F_), lin(F_, H)
            self.layers.append(layer)
        self.norm = torch.nn.Parameter(torch.ones(H))
        self.lm_head = None if c["tie_word_embeddings"] else lin(H, V)
        inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, self.d, 2).float() / self.d))
        t = torch.arange(c["max_position_embeddings"]).float()
        freqs = torch.outer(t, inv)
        emb = torch.cat([freqs, freqs], dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.c["rms_norm_eps"])
        return w * xf.to(x.dtype)

    @staticmethod
    def rotate_half(x):
        a, b = x.chunk(2, dim=-1)
        return torch.cat([-b, a], dim=-1)

    def forward(self, ids):
        B, T = ids.shape
        x = self.embed_tokens(ids)
        cos, sin = self.cos[:T].to(x.dtype), self.sin[:T].to(x.dtype)
        mask = torch.full((T, T), float("-inf"), device=ids.device).triu(1)
        for L in self.layers:
            h = self.rmsnorm(x, L.input_layernorm)
            q = L.q_proj(h).view(B, T, self.nh, self.d).transpose(1, 2)
            k = L.k_proj(h).view(B, T, self.nkv, self.d).transpose(1, 2)
            v = L.v_proj(h).view(B, T, self.nkv, self.d).transpose(1, 2)
            q = q * cos + self.rotate_half(q) * sin
            k = k * cos + self.rotate_half(k) * sin
            k = k.repeat_interleave(self.nh // self.nkv, dim=1)
            v = v.repeat_interleave(self.nh // self.nkv, dim=1)
            s = (q @ k.transpose(-1, -2)) / math.sqrt(self.d) + mask
            p = torch.softmax(s.float(), dim=-1).to(q.dtype)
            a = (p @ v).transpose(1, 2).reshape(B, T, self.nh * self.d)
            x = x + L.o_proj(a)
            h = self.rmsnorm(x, L.post_attention_layernorm)
            x = x + L.down_proj(F.silu(L.gate_proj(h)) * L.up_proj(h))
        h = self.rmsnorm(x, self.norm)
        return h @ self.embed_tokens.weight.t() if self.lm_head is None else self.lm_head(h)

    def hf_state_dict(self):
        out = {"model.embed_tokens.weight": self.embed_tokens.weight, "model.norm.weight": self.norm}
        if self.lm_head is not None:  # tied: Hugging Face's files hold the embedding only
            out["lm_head.weight"] = self.lm_head.weight
        for i, L in enumerate(self.layers):
            p = f"model.layers.{i}."
            out[p + "input_layernorm.weight"] = L.input_layernorm
            out[p + "post_attention_layernorm.weight"] = L.post_attention_layernorm
            for n in ("q_proj", "k_proj", "v_proj", "o_proj"):
                out[p + f"self_attn.{n}.weight"] = getattr(L, n).weight
            for n in ("gate_proj", "up_proj", "down_proj"):
                out[p + f"mlp.{n}.weight"] = getattr(L, n).weight
        return out


def init_weights(model, seed):
    g = torch.Generator().manual_seed(seed)
    scaled = 0.02 / math.sqrt(2 * model.c["num_hidden_layers"])  # residual-stream writers
    for name, p in model.named_parameters():
        if p.dim() == 1:
            continue  # norms stay at 1
        std = scaled if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
        with torch.no_grad():
            p.copy_(torch.randn(p.shape, generator=g) * std)


def write_safetensors(path, tensors):
    """The safetensors layout: u64 header length, JSON header, raw little-endian data."""
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors.items():
        data = t.detach().to("cpu", torch.float16).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def save(model, args, log):
    os.makedirs(args.out, exist_ok=True)
    c = model.c
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
              "attention_bias": False, "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2,
              "pretraining_tp": 1, "rope_scaling": None, "torch_dtype": "float16", **c}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2}, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(args.out, "model.safetensors"), model.hf_state_dict())
    if os.path.abspath(args.tokenizer) != os.path.abspath(os.path.join(args.out, "tokenizer.model")):
        shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.model"))
    with open(os.path.join(args.out, "training_log.json"), "w") as f:
        json.dump(log, f, indent=1)
        f.write("\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3.2), dpi=100)
        ax.plot([r["step"] for r in log["train"]], [r["loss"] for r in log["train"]], label="train")
        ax.plot([r["step"] for r in log["heldout"]], [r["loss"] for r in log["heldout"]], "o-",
                label="held-out")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats/token)")
        ax.set_ylim(top=min(8.5, max(r["loss"] for r in log["train"])))
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "loss_curve.png"))
    except ImportError:
        print("matplotlib missing: no loss_curve.png", flush=True)


@torch.no_grad()
def heldout_loss(model, data, seq, n_windows, device, amp):
    """Mean loss over n_windows fixed, evenly spaced windows of the held-out tokens."""
    model.eval()
    starts = np.linspace(0, len(data) - seq - 2, n_windows).astype(np.int64)
    total = 0.0
    for s in starts:
        x = torch.from_numpy(data[s:s + seq + 1].astype(np.int64)).to(device)[None]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(x[:, :-1])
        total += F.cross_entropy(logits.float().view(-1, logits.size(-1)), x[:, 1:].reshape(-1)).item()
    model.train()
    return total / n_windows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", default="auto", help="number of optimizer steps, or auto")
    ap.add_argument("--time-budget", type=float, default=210.0, help="seconds, for --steps auto")
    ap.add_argument("--batch", type=int, default=64, help="sequences per step")
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=1.5e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--config", choices=sorted(CONFIGS), default="docs-8m", help="model shape")
    ap.add_argument("--layers", type=int, help="override the config's layer count (smoke tests)")
    ap.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    device = torch.device(args.device)
    amp = device.type == "cuda"

    train = np.fromfile(os.path.join(args.data, "train.bin"), dtype=np.uint16)
    heldout = np.fromfile(os.path.join(args.data, "heldout.bin"), dtype=np.uint16)
    c = dict(CONFIGS[args.config])
    if args.layers:
        c["num_hidden_layers"] = args.layers
    assert args.seq <= c["max_position_embeddings"]
    assert int(train.max()) < c["vocab_size"], "tokens beyond the vocabulary"
    model = Llama(c)
    init_weights(model, args.seed)
    model.to(device)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters, {n_params * 2 / 1e6:.1f} MB in fp16; train {len(train)} "
          f"tokens, held-out {len(heldout)}; device {device}", flush=True)

    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    data = torch.from_numpy(train.astype(np.int64)).to(device)
    batch_gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    arange = torch.arange(args.seq + 1, device=device)

    total_steps = None if args.steps == "auto" else int(args.steps)
    log = {"settings": {**vars(args), "config": c, "parameters": n_params,
                        "train_tokens": int(len(train)), "heldout_tokens": int(len(heldout)),
                        "torch": torch.__version__, "python": platform.python_version(),
                        "cuda_device": torch.cuda.get_device_name() if amp else None},
           "train": [], "heldout": []}

    def lr_at(step):
        if step < args.warmup:
            return args.lr * (step + 1) / args.warmup
        span = max(1, (total_steps or 10**9) - args.warmup)
        progress = min(1.0, (step - args.warmup) / span)
        return args.lr * (args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))

    t_start = time.time()
    t_probe = None
    step = 0
    while total_steps is None or step < total_steps:
        if total_steps is None and step == 10:
            if amp:
                torch.cuda.synchronize()
            t_probe = time.time()
        if total_steps is None and step == 40:
            if amp:
                torch.cuda.synchronize()
            per_step = (time.time() - t_probe) / 30
            total_steps = max(41, int((args.time_budget - (time.time() - t_start)) / per_step) + 40)
            print(f"--steps auto: {per_step * 1e3:.1f} ms/step -> {total_steps} steps "
                  f"(repeat this run exactly with --steps {total_steps})", flush=True)
            log["settings"]["steps_resolved"] = total_steps
        starts = torch.randint(0, len(train) - args.seq - 1, (args.batch,), generator=batch_gen)
        idx = starts.to(device)[:, None] + arange[None]
        xy = data[idx]
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            logits = model(xy[:, :-1])
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), xy[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 25 == 0 or step == (total_steps or 0) - 1:
            elapsed = time.time() - t_start
            rec = {"step": step, "loss": round(loss.item(), 5), "lr": lr_at(step),
                   "grad_norm": round(gnorm.item(), 4), "elapsed_s": round(elapsed, 2),
                   "tokens": (step + 1) * args.batch * args.seq}
            log["train"].append(rec)
            print(f"step {step} loss {rec['loss']:.4f} lr {rec['lr']:.2e} gnorm {rec['grad_norm']:.3f} "
                  f"{rec['tokens'] / max(elapsed, 1e-9):.0f} tok/s {elapsed:.1f}s", flush=True)
        if (step % args.eval_every == 0 and step > 0) or step == (total_steps or 0) - 1:
            hl = heldout_loss(model, heldout, args.seq, 32, device, amp)
            log["heldout"].append({"step": step, "loss": round(hl, 5), "ppl": round(math.exp(hl), 3)})
            print(f"held-out step {step}: loss {hl:.4f} ppl {math.exp(hl):.2f}", flush=True)
        step += 1
    log["settings"]["wall_s"] = round(time.time() - t_start, 1)
    save(model, args, log)
    print(f"saved {args.out}: {step} steps in {log['settings']['wall_s']} s", flush=True)


if __name__ == "__main__":
    main()
