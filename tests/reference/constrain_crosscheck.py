"""Cross-check of the constraint engine's token masks against llguidance (PyPI), an independent
engine (issue 36, item 1: "the allowed-token sets match").

On a 32,000-piece SentencePiece vocabulary trained by `llama2 train-tokenizer`
(benchmarks/cpu/constrain_tokenizer.sh), for a sample of JSON Schemas: random token walks are
sampled from llguidance's mask and from ours, and at every step both engines' allowed-token sets
are compared bit for bit (our masks come from `llama2_constrain_sample --replay`).

Made comparable: JSON without whitespace on both sides (our JsonWhitespace::kNone; llguidance's
whitespace_flexible false with separators "," and ":"), and every object schema with
additionalProperties false (llguidance, like JSON Schema, otherwise allows extra properties,
which we never produce). SentencePiece's dummy prefix (our first token drops a leading space,
docs/structured-output.md) has no counterpart in llguidance: the first token of every walk is
drawn from tokens without a leading space, and step 0 compares only those.

Token bytes for llguidance are built here from the SentencePiece model with the Python
sentencepiece package (normal pieces with U+2581 as a space, <0xNN> as the byte), independently
of our C++ TokenVocabulary. Control pieces and <unk> are special tokens; EOS is </s>.

One-off (not in CI: llguidance is a ~10 MB wheel outside the project's requirements, and the
32,000-piece vocabulary takes minutes to train):

    python3 -m venv /tmp/xcheck && /tmp/xcheck/bin/pip install llguidance==1.9.1 sentencepiece==0.2.3
    benchmarks/cpu/constrain_tokenizer.sh
    cmake --build build --target llama2_constrain_sample
    /tmp/xcheck/bin/python tests/reference/constrain_crosscheck.py build/tests/llama2_constrain_sample \
        build/constrain/tokenizer-32k.model

Known differences, each where JSON (RFC 8259) or the schema allows what we allow: DEL (U+007F)
raw in strings (we allow it, llguidance does not; its tokens are left out of the comparison); the
escape \\/ (we allow it) and \\uD800-\\uDFFF (llguidance allows lone surrogates, we do not), checked
after a backslash up to those; "-0" for integers whose range has negatives (llguidance allows it
for some ranges and not others); llguidance's numeric ranges refusing to end a decimal that is in
range. At steps where llguidance forces bytes (compute_ff_bytes() not empty) it allows only the
canonical tokenization of them, so there the check is that its set lies within ours.

Recorded result (2026-12-03, llguidance 1.9.1, 10 schemas x 8 walks, 32,000 pieces, on the tree
of the commit that added this file; 34 s on the 2-core development VM):

    schema 8 step 7 after '{"v":2.2': 15 ours, 12 llguidance; only ours [b',', b',"', b','], only llguidance []
    schema 9 step 8 after '{"outer":{"inner":{"z":-': 20 ours, 18 llguidance; only ours [b'0', b'0'], only llguidance []
    schema 9 step 8 after '{"outer":{"inner":{"z":-': 20 ours, 18 llguidance; only ours [b'0', b'0'], only llguidance []
    80 walks: 1512 unforced steps compared for equality (0 after a backslash, up to the documented escape differences), 770 forced steps for llguidance's subset; 3 differ
    tokens only ours allows (token: steps): [(b'0', 4), (b',', 2), (b',"', 1)]
    tokens only llguidance allows: []
    0 passed, 1 failed

That is: 1,512 unforced steps compared token for token over 32,000 tokens, 1,509 identical; the 3
that differ are the two known kinds above ('2.2' may end in [-1.5, 2.25]; '-0' after '-' in a
range with negatives), both valid documents that jsonschema accepts. The 770 forced steps all
hold llguidance's canonical token within ours.
"""
import json
import random
import subprocess
import sys
import tempfile

import llguidance
import sentencepiece as spm

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12},
        "unit": {"enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 14}},
     "required": ["city", "unit", "days"]},
    {"type": "object", "properties": {
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
        "ok": {"type": "boolean"},
        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
     "required": ["tags", "ok", "note"]},
    {"$defs": {"Item": {"type": "object", "properties": {
        "sku": {"type": "string", "minLength": 2, "maxLength": 6},
        "qty": {"type": "integer", "minimum": 0, "maximum": 999}}, "required": ["sku", "qty"]}},
     "type": "object", "properties": {"items": {"type": "array", "items": {"$ref": "#/$defs/Item"},
                                               "minItems": 1, "maxItems": 4}},
     "required": ["items"]},
    {"type": "array", "items": {"type": "number"}, "maxItems": 5},
    {"type": "object", "properties": {"a": {"const": "fixed"}, "b": {"type": ["integer", "null"]},
                                      "c": {"enum": [1, "two", None, True]}},
     "required": ["a", "b", "c"]},
    {"type": "object", "properties": {"x": {"type": "integer", "minimum": -50, "maximum": 50},
                                      "y": {"type": "string", "pattern": "^[a-z]{2,4}$"}},
     "required": ["x", "y"]},
    {"type": "object", "properties": {"opt1": {"type": "string"}, "opt2": {"type": "integer"},
                                      "req": {"type": "boolean"}}, "required": ["req"]},
    {"type": "object", "properties": {"v": {"type": "number", "minimum": -1.5, "maximum": 2.25},
                                      "w": {"type": "string", "minLength": 3, "maxLength": 5}},
     "required": ["v", "w"]},
    {"type": "object", "properties": {"outer": {"type": "object", "properties": {
        "inner": {"type": "object", "properties": {"z": {"type": "integer", "exclusiveMaximum": 100}},
                  "required": ["z"]}}, "required": ["inner"]}}, "required": ["outer"]},
]


def strict(schema):
    """additionalProperties false on every object schema (both engines then agree on extras)."""
    if isinstance(schema, dict):
        out = {k: strict(v) for k, v in schema.items()}
        if out.get("type") == "object" or "properties" in out:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(v) for v in schema]
    return schema


def token_bytes(sp):
    toks, special = [], []
    for i in range(sp.get_piece_size()):
        p = sp.id_to_piece(i)
        if sp.is_byte(i):
            toks.append(bytes([int(p[3:5], 16)]))
        elif sp.is_control(i) or sp.is_unknown(i):
            toks.append(b"")
            special.append(i)
        else:
            toks.append(p.replace("\u2581", " ").encode("utf-8"))
    return toks, special


class Wrapper:
    """The tokenizer llguidance sees. Its tokenize is greedy longest-match over the token bytes:
    llguidance uses it only to tokenize bytes the grammar forces, and SentencePiece's own encode
    would put a dummy-prefix space in front of them, which confuses the forcing."""

    def __init__(self, sp, toks, special):
        self.eos_token_id = sp.eos_id()
        self.bos_token_id = sp.bos_id()
        self.tokens = toks
        self.special_token_ids = special
        self.by_bytes = {}
        for i, t in enumerate(toks):
            if t and i not in special:
                self.by_bytes.setdefault(t, i)
        self.longest = max(len(t) for t in toks)

    def __call__(self, s):
        data = s if isinstance(s, bytes) else s.encode("utf-8")
        out, i = [], 0
        while i < len(data):
            for k in range(min(self.longest, len(data) - i), 0, -1):
                if data[i:i + k] in self.by_bytes:
                    out.append(self.by_bytes[data[i:i + k]])
                    i += k
                    break
        return out


def allowed_set(mask_bytes, n):
    words = [int.from_bytes(mask_bytes[i:i + 4], "little") for i in range(0, len(mask_bytes), 4)]
    return {i for i in range(n) if (words[i >> 5] >> (i & 31)) & 1}


def ours_set(hexmask, n):
    out = set()
    for w in range(len(hexmask) // 8):
        word = int(hexmask[8 * w:8 * w + 8], 16)
        while word:
            b = word & -word
            i = 32 * w + b.bit_length() - 1
            if i < n:
                out.add(i)
            word ^= b
    return out


def main():
    sampler, model = sys.argv[1], sys.argv[2]
    walks_per_schema = int(sys.argv[3]) if len(sys.argv) > 3 else 4
    sp = spm.SentencePieceProcessor(model_file=model)
    n = sp.get_piece_size()
    toks, special = token_bytes(sp)
    tok = llguidance.LLTokenizer(llguidance.TokenizerWrapper(Wrapper(sp, toks, special)))
    no_space_start = {i for i in range(n) if toks[i] and not toks[i].startswith(b" ")}
    del_tokens = {i for i in range(n) if b"\x7f" in toks[i]}
    # llguidance's matcher allows, where the grammar forces bytes, only the canonical (tokenizer's
    # own) tokenization of them; we allow every token that keeps the text viable. At those steps
    # (compute_ff_bytes() not empty) the check is llguidance's set within ours; elsewhere equality.
    rng = random.Random(36)
    opts = {"whitespace_flexible": False, "item_separator": ",", "key_separator": ":",
            "json_allow_general_unicode_escapes": True}
    walks = []
    for sid, raw in enumerate(SCHEMAS):
        schema = strict(raw)
        grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=opts)
        for w in range(walks_per_schema):
            m = llguidance.LLMatcher(tok, grammar, log_level=0)
            assert not m.is_error(), m.get_error()
            tokens, masks, forced = [], [], []
            for step in range(80):
                allowed = allowed_set(m.compute_bitmask(), n)
                masks.append(allowed)
                forced.append(len(m.compute_ff_bytes()) > 0)
                choices = sorted(allowed - {sp.eos_id()})
                if step == 0 and not forced[0]:
                    choices = [c for c in choices if c in no_space_start]
                if not choices or (sp.eos_id() in allowed and rng.random() < 0.3):
                    break
                t = rng.choice(choices)
                if step == 0 and forced[0]:
                    t = choices[0]  # the one canonical token llguidance allows
                tokens.append(t)
                assert m.consume_token(t)
            walks.append({"id": len(walks), "schema": schema, "tokens": tokens, "whitespace": "none",
                          "llg_masks": masks, "forced": forced, "sid": sid})
    steps = diff_steps = forced_steps = known_steps = 0
    only_ours, only_llg = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        with open(f"{tmp}/in.jsonl", "w") as f:
            for wk in walks:
                f.write(json.dumps({k: wk[k] for k in ("id", "schema", "tokens", "whitespace")}) + "\n")
        subprocess.run([sampler, "--replay", "--tokenizer", model, "--schemas", f"{tmp}/in.jsonl",
                        "--out", f"{tmp}/out.jsonl"], check=True)
        results = [json.loads(l) for l in open(f"{tmp}/out.jsonl")]
    for wk, res in zip(walks, results):
        if "masks" not in res:
            print(f"schema {wk['sid']}: refused by ours: {res.get('error')}")
            diff_steps += 1
            continue
        if res["accepted"] != len(wk["tokens"]):
            print(f"schema {wk['sid']} walk {wk['id']}: ours refused token {res['accepted']}")
            diff_steps += 1
        for step, (llg, hexmask) in enumerate(zip(wk["llg_masks"], res["masks"])):
            ours = ours_set(hexmask, n)
            if wk["forced"][step]:
                # llguidance allows only the canonical tokenization of forced bytes: a subset.
                forced_steps += 1
                if not llg <= ours:
                    diff_steps += 1
                    print(f"schema {wk['sid']} step {step}: forced, llguidance allows "
                          f"{[toks[t] for t in sorted(llg - ours)][:8]} that ours does not")
                continue
            if step == 0:
                llg, ours = llg & (no_space_start | {sp.eos_id()}), ours & (no_space_start | {sp.eos_id()})
            # RFC 8259 allows DEL (U+007F) raw in a string, and so do we; llguidance does not.
            ours -= del_tokens
            steps += 1
            text = b"".join(toks[t] for t in wk["tokens"][:step])
            if (len(text) - len(text.rstrip(b"\\"))) % 2 == 1 and ours != llg:
                # After a backslash: we allow the escape \/ (RFC 8259), llguidance does not; we refuse
                # \uD800-\uDFFF (a lone surrogate is no character), llguidance allows them.
                slash = {t for t in ours - llg if toks[t].startswith(b"/")}
                surrogate = {t for t in llg - ours if toks[t][:2].lower() == b"ud" and
                             (len(toks[t]) == 2 or toks[t][2:3].lower() in b"89abcdef")}
                if slash or surrogate:
                    known_steps += 1
                    ours, llg = ours - slash, llg - surrogate
            if ours != llg:
                diff_steps += 1
                shown = text.decode("utf-8", "replace")
                a, b = sorted(ours - llg), sorted(llg - ours)
                for t in a:
                    only_ours[toks[t]] = only_ours.get(toks[t], 0) + 1
                for t in b:
                    only_llg[toks[t]] = only_llg.get(toks[t], 0) + 1
                if diff_steps <= 40:
                    print(f"schema {wk['sid']} step {step} after {shown!r}: {len(ours)} ours, {len(llg)} llguidance; "
                          f"only ours {[toks[t] for t in a[:8]]}, only llguidance {[toks[t] for t in b[:8]]}")
    print(f"{len(walks)} walks: {steps} unforced steps compared for equality ({known_steps} after a "
          f"backslash, up to the documented escape differences), {forced_steps} forced steps for "
          f"llguidance's subset; {diff_steps} differ")
    if only_ours or only_llg:
        print("tokens only ours allows (token: steps):", sorted(only_ours.items(), key=lambda x: -x[1])[:15])
        print("tokens only llguidance allows:", sorted(only_llg.items(), key=lambda x: -x[1])[:15])
    print(f"{1 if diff_steps == 0 else 0} passed, {0 if diff_steps == 0 else 1} failed")
    return 0 if diff_steps == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
