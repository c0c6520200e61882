#!/usr/bin/env python3
"""PyTorch checkpoint fixtures, written by torch.save itself (not by the engine's code).

Run once where torch + transformers + sentencepiece are installed (CPU is enough; PyPI's torch is
the multi-GB CUDA build, so CI installs none and uses the committed files):

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch transformers sentencepiece
    /tmp/torchenv/bin/python tests/reference/make_meta_fixtures.py

It writes:
  tests/models/tiny-bf16-meta-mp1/, tiny-bf16-meta-mp2/
      tests/models/tiny-bf16 in Meta's own folder format, at model-parallel degree 1 and 2:
      params.json, consolidated.NN.pth (Meta's names, Meta's splits across files, q/k rows in
      Meta's interleaved RoPE order: the inverse of the permutation Hugging Face's
      convert_llama_weights_to_hf.py applies), tokenizer.model. Before writing, a forward pass
      written after Meta's llama/model.py (complex-number RoPE over interleaved pairs, its own
      RMSNorm, attention and SwiGLU) runs on the Meta tensors and must give Hugging Face's logits
      for the original folder (LlamaForCausalLM, fp32): so the layout is checked against both
      reference implementations, not against the engine.
  tests/models/tiny-bf16-bin/          pytorch_model.bin (model.state_dict(): an OrderedDict with
                                       _metadata), config.json, tokenizer.model
  tests/models/tiny-bf16-bin-sharded/  pytorch_model-0000N-of-00002.bin (plain dicts, with the
                                       rotary_emb.inv_freq buffers old transformers saved) and
                                       pytorch_model.bin.index.json, as transformers 4.x wrote them;
                                       both folders must load in transformers to the same logits.
  tests/reference/torch_files/         small torch.save files for the reader's unit tests
                                       (tests/unit/test_torch_file.cpp), valid and refused ones,
                                       with expected.json holding torch's own values.
"""
import argparse
import collections
import json
import os
import platform
import shutil
import sys
import zipfile

import sentencepiece as spm
import torch
import transformers
from safetensors.torch import load_file
from transformers import LlamaForCausalLM

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE = "tiny-bf16"
# tiny-bf16's intermediate size 172 = Meta's formula with these (int(8 * 64 / 3) = 170, x1.01 =
# 171, rounded up to a multiple of 4).
MULTIPLE_OF, FFN_DIM_MULTIPLIER = 4, 1.01


def intermediate_size(dim):
    hidden = int(FFN_DIM_MULTIPLIER * int(2 * 4 * dim / 3))
    return MULTIPLE_OF * ((hidden + MULTIPLE_OF - 1) // MULTIPLE_OF)


def to_meta_rope_order(w, heads):
    """HF's q/k rows -> Meta's: the inverse of convert_llama_weights_to_hf.py's permute()."""
    rows, cols = w.shape
    return w.view(heads, 2, rows // heads // 2, cols).transpose(1, 2).reshape(rows, cols)


def hf_to_meta(sd, cfg):
    """The merged (model-parallel degree 1) Meta state dict of an HF Llama state dict."""
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    out = collections.OrderedDict()
    out["tok_embeddings.weight"] = sd["model.embed_tokens.weight"]
    out["norm.weight"] = sd["model.norm.weight"]
    out["output.weight"] = sd["lm_head.weight"]
    for l in range(cfg["num_hidden_layers"]):
        p, m = f"model.layers.{l}.", f"layers.{l}."
        out[m + "attention.wq.weight"] = to_meta_rope_order(sd[p + "self_attn.q_proj.weight"], heads)
        out[m + "attention.wk.weight"] = to_meta_rope_order(sd[p + "self_attn.k_proj.weight"], kv)
        out[m + "attention.wv.weight"] = sd[p + "self_attn.v_proj.weight"]
        out[m + "attention.wo.weight"] = sd[p + "self_attn.o_proj.weight"]
        out[m + "feed_forward.w1.weight"] = sd[p + "mlp.gate_proj.weight"]
        out[m + "feed_forward.w2.weight"] = sd[p + "mlp.down_proj.weight"]
        out[m + "feed_forward.w3.weight"] = sd[p + "mlp.up_proj.weight"]
        out[m + "attention_norm.weight"] = sd[p + "input_layernorm.weight"]
        out[m + "ffn_norm.weight"] = sd[p + "post_attention_layernorm.weight"]
    head_dim = cfg["hidden_size"] // heads
    theta = cfg.get("rope_theta", 10000.0)
    out["rope.freqs"] = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    return out


def split_dim(name):
    """Meta's model-parallel split of each tensor (fairscale's layers in llama/model.py)."""
    if name.endswith(("norm.weight",)) or name == "rope.freqs":
        return None  # whole in every file
    if name == "tok_embeddings.weight" or name.endswith(("attention.wo.weight", "feed_forward.w2.weight")):
        return 1  # ParallelEmbedding / RowParallelLinear
    return 0  # ColumnParallelLinear


def shard(meta, mp):
    shards = [collections.OrderedDict() for _ in range(mp)]
    for name, t in meta.items():
        d = split_dim(name)
        parts = [t] * mp if d is None else list(torch.chunk(t, mp, dim=d))
        for k in range(mp):
            shards[k][name] = parts[k].clone().contiguous()
    return shards


@torch.no_grad()
def meta_forward(meta, params, tokens):
    """llama/model.py's Transformer.forward (one sequence, no cache), in fp32."""
    dim, heads = params["dim"], params["n_heads"]
    kv, eps = params["n_kv_heads"], params["norm_eps"]
    d = dim // heads
    theta = params.get("rope_theta", 10000.0)
    w = {k: v.float() for k, v in meta.items()}
    T = len(tokens)
    freqs = 1.0 / (theta ** (torch.arange(0, d, 2)[: (d // 2)].float() / d))
    freqs_cis = torch.polar(torch.ones(T, d // 2), torch.outer(torch.arange(T).float(), freqs))

    def norm(x, weight):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

    def rope(x):  # [T, h, d]
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
        return torch.view_as_real(xc * freqs_cis[:, None, :]).flatten(2)

    h = w["tok_embeddings.weight"][torch.tensor(tokens)]
    mask = torch.full((T, T), float("-inf")).triu(1)
    for l in range(params["n_layers"]):
        p = f"layers.{l}."
        x = norm(h, w[p + "attention_norm.weight"])
        q = rope((x @ w[p + "attention.wq.weight"].T).view(T, heads, d))
        k = rope((x @ w[p + "attention.wk.weight"].T).view(T, kv, d))
        v = (x @ w[p + "attention.wv.weight"].T).view(T, kv, d)
        k = k.repeat_interleave(heads // kv, dim=1)
        v = v.repeat_interleave(heads // kv, dim=1)
        s = torch.einsum("thd,shd->hts", q, k) / d ** 0.5 + mask
        o = torch.einsum("hts,shd->thd", s.softmax(-1), v).reshape(T, dim)
        h = h + o @ w[p + "attention.wo.weight"].T
        x = norm(h, w[p + "ffn_norm.weight"])
        g = torch.nn.functional.silu(x @ w[p + "feed_forward.w1.weight"].T)
        h = h + (g * (x @ w[p + "feed_forward.w3.weight"].T)) @ w[p + "feed_forward.w2.weight"].T
    return norm(h, w["norm.weight"]) @ w["output.weight"].T


@torch.no_grad()
def hf_logits(model_dir, tokens):
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model(torch.tensor([tokens])).logits[0].float()


def check_close(what, got, want, tol=1e-4):
    diff = (got - want).abs().max().item()
    print(f"{what}: max |logit diff| {diff:.3g} over {want.numel()} values")
    if not diff <= tol:
        sys.exit(f"{what} differs from Hugging Face's logits by {diff} (> {tol})")


def write_meta(src_dir, out_dir, mp, params, meta, tokens, want):
    merged = collections.OrderedDict()
    for name in meta:  # Meta's code would gather the shards back along their split
        d = split_dim(name)
        merged[name] = meta[name] if d is None else torch.cat(list(torch.chunk(meta[name], mp, dim=d)), dim=d)
    check_close(f"Meta-style forward over MP={mp} shards", meta_forward(merged, params, tokens), want)
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for k, sd in enumerate(shard(meta, mp)):
        torch.save(sd, os.path.join(out_dir, f"consolidated.{k:02d}.pth"))
    with open(os.path.join(out_dir, "params.json"), "w") as f:
        json.dump(params, f)
    shutil.copy(os.path.join(src_dir, "tokenizer.model"), out_dir)


def write_bin(src_dir, out_dir, sd, sharded, cfg):
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    for f in ("config.json", "generation_config.json", "tokenizer.model"):
        shutil.copy(os.path.join(src_dir, f), out_dir)
    if not sharded:
        model = LlamaForCausalLM.from_pretrained(src_dir, dtype=torch.bfloat16)
        torch.save(model.state_dict(), os.path.join(out_dir, "pytorch_model.bin"))
        return
    names = list(sd)
    d = cfg["hidden_size"] // cfg["num_attention_heads"]
    inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** (torch.arange(0, d, 2).float() / d))
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    index = {"metadata": {"total_size": sum(t.numel() * t.element_size() for t in sd.values())},
             "weight_map": {}}
    for k, part in enumerate(halves):
        file = f"pytorch_model-{k + 1:05d}-of-{len(halves):05d}.bin"
        shard_dict = {n: sd[n].contiguous() for n in part}
        for n in part:  # transformers < 4.31 saved RoPE's inverse frequencies with each layer
            if n.endswith("self_attn.q_proj.weight"):
                shard_dict[n.replace("q_proj.weight", "rotary_emb.inv_freq")] = inv_freq.clone()
        torch.save(shard_dict, os.path.join(out_dir, file))
        index["weight_map"].update({n: file for n in shard_dict})
    with open(os.path.join(out_dir, "pytorch_model.bin.index.json"), "w") as f:
        json.dump(index, f, indent=2)


def unit_files(out_dir):
    """Small torch.save files for the reader's unit tests; expected.json has torch's values."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    path = lambda n: os.path.join(out_dir, n)
    expected = {}

    def record(file, sd):
        # fp32 bit patterns of torch's own widening: compared exactly, infinities included.
        expected[file] = {k: {"dtype": str(v.dtype), "shape": list(v.shape),
                              "f32_bits": v.float().flatten().view(torch.int32).tolist()}
                          for k, v in sd.items()}

    torch.manual_seed(0)
    lin = torch.nn.Linear(5, 3).to(torch.float16)  # a module's state_dict: OrderedDict + _metadata
    sd = lin.state_dict()
    big = torch.arange(-6, 18, dtype=torch.float32) / 4  # one storage, several views
    sd["shared.whole"] = big
    sd["shared.middle"] = big[4:10].view(2, 3)  # storage offset 4
    sd["shared.tail"] = big[20:]
    sd["bf16.matrix"] = (torch.randn(4, 7) * 3).to(torch.bfloat16)
    sd["f32.scalar"] = torch.tensor(2.5)
    sd["f32.cube"] = torch.arange(24, dtype=torch.float32).reshape(2, 3, 4)
    sd["f16.specials"] = torch.tensor([0.0, -0.0, 65504.0, 6e-8, float("inf"), -1.5], dtype=torch.float16)
    torch.save(sd, path("state_dict.pth"))
    record("state_dict.pth", sd)
    plain = {"a.weight": torch.arange(6, dtype=torch.bfloat16).reshape(3, 2), "b": torch.ones(300, 2)}
    torch.save(plain, path("plain_dict.pth"))
    record("plain_dict.pth", plain)
    torch.save({"ids": torch.arange(4), "w": torch.ones(2)}, path("int64.pth"))
    torch.save({"t": torch.arange(6.0).reshape(2, 3).t()}, path("noncontiguous.pth"))
    torch.save({"p": torch.nn.Parameter(torch.ones(2))}, path("parameter.pth"))
    torch.save({"model": {"w": torch.ones(2)}}, path("nested.pth"))
    torch.save({"w": torch.ones(2), "steps": [1, 2]}, path("list_value.pth"))
    torch.save({"w": torch.ones(2)}, path("protocol4.pth"), pickle_protocol=4)
    torch.save({"w": torch.ones(2)}, path("legacy.pth"), _use_new_zipfile_serialization=False)
    # The same archive, its records deflated (torch never compresses; a zip tool might).
    with zipfile.ZipFile(path("plain_dict.pth")) as src, \
            zipfile.ZipFile(path("compressed.pth"), "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info.filename))
    # Python's zipfile with ZIP64 records forced on every entry (torch writes ZIP64 end records).
    with zipfile.ZipFile(path("plain_dict.pth")) as src, \
            zipfile.ZipFile(path("zip64_entries.pth"), "w", zipfile.ZIP_STORED) as dst:
        for info in src.infolist():
            with dst.open(info.filename, "w", force_zip64=True) as out:
                out.write(src.read(info.filename))
    record("zip64_entries.pth", plain)
    with open(path("expected.json"), "w") as f:
        json.dump({"generator": generator(), "files": expected}, f, indent=1)


def generator():
    return {"script": "tests/reference/make_meta_fixtures.py", "torch": torch.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=ROOT, help="repository root")
    args = ap.parse_args()
    models = os.path.join(args.root, "tests", "models")
    src_dir = os.path.join(models, SOURCE)
    cfg = json.load(open(os.path.join(src_dir, "config.json")))
    if intermediate_size(cfg["hidden_size"]) != cfg["intermediate_size"]:
        sys.exit("MULTIPLE_OF / FFN_DIM_MULTIPLIER do not give the source's intermediate size")
    sd = load_file(os.path.join(src_dir, "model.safetensors"))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(src_dir, "tokenizer.model"))
    tokens = [sp.bos_id()] + sp.encode("The quick brown fox jumps over the lazy dog, 北京 🙂.")
    want = hf_logits(src_dir, tokens)

    params = {"dim": cfg["hidden_size"], "multiple_of": MULTIPLE_OF,
              "ffn_dim_multiplier": FFN_DIM_MULTIPLIER, "n_heads": cfg["num_attention_heads"],
              "n_kv_heads": cfg["num_key_value_heads"], "n_layers": cfg["num_hidden_layers"],
              "norm_eps": cfg["rms_norm_eps"], "vocab_size": -1}
    meta = hf_to_meta(sd, cfg)
    for mp in (1, 2):
        write_meta(src_dir, os.path.join(models, f"{SOURCE}-meta-mp{mp}"), mp, params, meta, tokens, want)
    for sharded, name in ((False, f"{SOURCE}-bin"), (True, f"{SOURCE}-bin-sharded")):
        out = os.path.join(models, name)
        write_bin(src_dir, out, sd, sharded, cfg)
        check_close(f"transformers reading {name}", hf_logits(out, tokens), want, tol=0.0)
    unit_files(os.path.join(args.root, "tests", "reference", "torch_files"))
    print(json.dumps(generator()))


if __name__ == "__main__":
    main()
