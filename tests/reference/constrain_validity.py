"""Validity of constrained JSON output (issue 36), checked by a validator that is not ours.

Generates 200 JSON Schemas whose output is bounded (enums, bounded integers and numbers,
maxLength strings, maxItems arrays, nested objects, anyOf, $defs/$ref, const, nullable types,
anchored patterns), samples outputs under the constraint engine's mask with
llama2_constrain_sample (random allowed tokens over a real SentencePiece vocabulary), and checks
with PyPI's jsonschema (Draft 2020-12) that every output that ended with EOS parses as JSON and
validates, and that at least 90% ended with EOS within the token limit.

    python tests/reference/constrain_validity.py SAMPLER TOKENIZER [TOKENIZER...]

Exit status 0 when every check holds; the last line reads 'N passed, M failed'.
"""
import json
import random
import subprocess
import sys
import tempfile

import jsonschema

WORDS = ["alpha", "beta", "gamma", "delta", "x", "a b", "é", "中文", "quote\"d", "back\\slash", ""]


def leaf(rng):
    kind = rng.randrange(9)
    if kind == 0:
        return {"type": "string", "maxLength": rng.randrange(0, 8), "minLength": 0}
    if kind == 1:
        lo = rng.randrange(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randrange(0, 200)}
    if kind == 2:
        lo = round(rng.uniform(-10, 10), rng.randrange(0, 3))
        s = {"type": "number", "minimum": lo, "maximum": lo + round(rng.uniform(0, 20), 2)}
        if rng.random() < 0.3:
            s["exclusiveMinimum"] = s.pop("minimum")
        return s
    if kind == 3:
        return {"enum": rng.sample(WORDS, rng.randrange(1, 5))}
    if kind == 4:
        return {"type": "boolean"}
    if kind == 5:
        return {"type": ["string", "null"], "maxLength": 5}
    if kind == 6:
        return {"const": rng.choice([1, "fixed", None, [1, 2], {"k": "v"}])}
    if kind == 7:
        return {"type": "string", "pattern": rng.choice(["^[a-z]{1,4}$", "^\\d{2}-\\d{2}$", "^(yes|no)$"])}
    return {"enum": [rng.randrange(100), True, None, "e"]}


def schema(rng, depth=0):
    kind = rng.randrange(6 if depth < 2 else 1)
    if kind == 0:
        return leaf(rng)
    if kind == 1:
        return {"type": "array", "items": schema(rng, depth + 1), "maxItems": rng.randrange(0, 4)}
    if kind == 2:
        return {"anyOf": [schema(rng, depth + 1), schema(rng, depth + 1)]}
    props = {f"p{i}": schema(rng, depth + 1) for i in range(rng.randrange(1, 5))}
    required = [k for k in props if rng.random() < 0.6]
    obj = {"type": "object", "properties": props, "required": required}
    if rng.random() < 0.5:
        obj["additionalProperties"] = False
    return obj


def schemas(n, seed=36):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        s = schema(rng)
        if i % 5 == 0:  # the Pydantic shape: a definition used through $ref
            s = {"$defs": {"Inner": s}, "type": "object",
                 "properties": {"inner": {"$ref": "#/$defs/Inner"}, "n": leaf(rng)},
                 "required": ["inner"], "title": "Outer", "description": "generated"}
        out.append(s)
    return out


def main():
    sampler, tokenizers = sys.argv[1], sys.argv[2:]
    cases = schemas(200)
    passed = failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        src = f"{tmp}/schemas.jsonl"
        with open(src, "w") as f:
            for i, s in enumerate(cases):
                f.write(json.dumps({"id": i, "schema": s}) + "\n")
        for tok in tokenizers:
            out = f"{tmp}/out.jsonl"
            subprocess.run([sampler, "--tokenizer", tok, "--schemas", src, "--out", out,
                            "--samples", "3", "--max-tokens", "300"], check=True)
            rows = [json.loads(l) for l in open(out)]
            stops = [r for r in rows if r["finish"] == "stop"]
            bad = []
            for r in rows:
                if r["finish"] == "refused":
                    bad.append((r["id"], "refused: " + r["error"]))
                    continue
                if r["finish"] != "stop":
                    continue
                try:
                    doc = json.loads(r["text"])
                    jsonschema.Draft202012Validator(cases[r["id"]]).validate(doc)
                except (ValueError, jsonschema.ValidationError) as e:
                    bad.append((r["id"], f"{r['text']!r}: {str(e).splitlines()[0]}"))
            share = len(stops) / max(1, len(rows))
            print(f"{tok}: {len(rows)} outputs, {len(stops)} stop ({share:.1%}), "
                  f"{len(rows) - len(stops)} length or refused, {len(bad)} invalid")
            for case_id, why in bad[:20]:
                print(f"  INVALID schema {case_id}: {json.dumps(cases[case_id])}\n    {why}")
            ok = not bad and share >= 0.9
            passed += ok
            failed += not ok
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
