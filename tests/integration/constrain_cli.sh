#!/usr/bin/env bash
# `generate --json-schema FILE | --regex RE | --grammar FILE` (issue 36) at 1 and 2 ranks: the output
# validates with PyPI's jsonschema / matches, and ends with stop; a schema with an unsupported
# keyword, a 10,000-deep schema, a bad GBNF file and two constraints at once each exit non-zero
# with one message naming the problem.
#   usage: constrain_cli.sh LLAMA2 MODELS
# shellcheck source=tests/integration/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../test_python.sh
source "$root/tests/test_python.sh"
test_python constrain.cli jsonschema
M=$MODELS/tiny-gqa
cat >"$TMP/person.json" <<'JSON'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 6},
 "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
 "age": {"type": "integer", "minimum": 0, "maximum": 99}}, "required": ["name", "age"]}
JSON
for np in 1 2; do
  run_capture "schema$np" "$np" generate --model "$M" --prompt "Person:" --json-schema "$TMP/person.json" \
    --temperature 0 --max-new-tokens 100 --json --quiet
  if [[ $(rc_of "schema$np") -eq 0 ]] && "$PY" - "$TMP/schema$np.out" "$TMP/person.json" <<'PY'; then
import json, sys, jsonschema
out = json.load(open(sys.argv[1]))
assert out["finish_reason"] == "stop", out
jsonschema.validate(json.loads(out["text"]), json.load(open(sys.argv[2])))
print(out["text"])
PY
    pass "np=$np: --json-schema output validates: $(tail -1 "$TMP/schema$np.out" | head -c 200)"
  else
    fail "np=$np: --json-schema"; cat "$TMP/schema$np.out" "$TMP/schema$np.err"
  fi
done
[[ $(cat "$TMP/schema1.out") == "$(cat "$TMP/schema2.out")" ]] || true  # timings differ; ids below
"$PY" -c 'import json,sys; a,b=(json.load(open(f))["token_ids"] for f in sys.argv[1:]); sys.exit(a!=b)' \
  "$TMP/schema1.out" "$TMP/schema2.out" && pass "np=1 and np=2 give the same ids" || fail "np=1 != np=2"

run_capture regex 1 generate --model "$M" --prompt "x" --regex '[a-d]{3}[0-9]' --temperature 0 --json --quiet
"$PY" -c 'import json,re,sys; o=json.load(open(sys.argv[1])); sys.exit(not (o["finish_reason"]=="stop" and re.fullmatch("[a-d]{3}[0-9]", o["text"])))' \
  "$TMP/regex.out" && pass "--regex output matches" || { fail "--regex"; cat "$TMP/regex.out" "$TMP/regex.err"; }
printf 'root ::= "go" ("!" | "?")\n' >"$TMP/g.gbnf"
run_capture gbnf 1 generate --model "$M" --prompt "x" --grammar "$TMP/g.gbnf" --temperature 0 --json --quiet
"$PY" -c 'import json,sys; o=json.load(open(sys.argv[1])); sys.exit(o["text"] not in ("go!","go?"))' \
  "$TMP/gbnf.out" && pass "--grammar output matches" || { fail "--grammar"; cat "$TMP/gbnf.out" "$TMP/gbnf.err"; }

echo '{"type": "string", "not": {"const": "a"}}' >"$TMP/bad.json"
run_capture bad 2 generate --model "$M" --prompt "x" --json-schema "$TMP/bad.json" --quiet
expect_failure bad '--json-schema.*not'
"$PY" -c 'print("{\"items\": " * 10000 + "{}" + "}" * 10000)' >"$TMP/deep.json"
run_capture deep 1 generate --model "$M" --prompt "x" --json-schema "$TMP/deep.json" --quiet
expect_failure deep 'max_nesting'
printf 'root ::= item\n' >"$TMP/bad.gbnf"
run_capture badg 1 generate --model "$M" --prompt "x" --grammar "$TMP/bad.gbnf" --quiet
expect_failure badg 'item'
run_capture two 1 generate --model "$M" --prompt "x" --regex a --grammar "$TMP/g.gbnf" --quiet
expect_failure two 'at most one of --json-schema, --regex, --grammar'
finish
