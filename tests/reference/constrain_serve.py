"""Constrained output through a real `llama2 serve` (issue 36), checked by a validator that is not ours.

For one model, at 1, 2 and 4 ranks on the CPU: the 200 bounded schemas of constrain_validity.py
sent over the Unix socket as "response_format" (greedy, all in flight at once, so rows batch),
plus regex, choice and GBNF requests. Checks:
  - at least 90% end with finish_reason "stop", every one of those parses and validates with PyPI's
    jsonschema (Draft 2020-12), the rest end with "length";
  - regex / choice / grammar outputs match (Python's re, the choice list);
  - 2 and 4 ranks give the same token ids as 1 rank, request for request (greedy);
  - a schema with an unsupported keyword is refused with an error naming it, and the server goes on;
  - tool calls (docs/tool-calling.md): `done` carries `tool_calls` whose names are the tools' and
    whose arguments validate against their schemas (required, named, auto), equal across TP degrees;
    a tool_choice naming no tool is refused.

    python tests/reference/constrain_serve.py LLAMA2 MPIRUN MODEL_DIR [NP...]

Exit status 0 when every check holds; the last line reads 'N passed, M failed'.
"""
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import socket_conn  # noqa: E402  (tests/socket_conn.py)

import jsonschema

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from constrain_validity import schemas  # noqa: E402

MAX_NEW = 300
EXTRA = [  # (request fields, check of the text)
    ({"regex": "[a-c]{2,5}-[0-9]{1,3}"}, lambda t: re.fullmatch("[a-c]{2,5}-[0-9]{1,3}", t)),
    ({"choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
    ({"grammar": 'root ::= "(" item ("," item){0,3} ")"\nitem ::= [0-9] | "x"\n'},
     lambda t: re.fullmatch(r"\((?:[0-9]|x)(?:,(?:[0-9]|x)){0,3}\)", t)),
    ({"response_format": {"type": "json_object"}}, lambda t: isinstance(json.loads(t), dict)),
]


# Short: the tiny model's 512 positions hold the rendered tool list (441 tokens) and the answer.
TOOLS = [{"type": "function", "function": {"name": "pick", "parameters": {
             "type": "object", "properties": {"x": {"enum": ["a", "b"]}}, "required": ["x"]}}},
         {"type": "function", "function": {"name": "note", "parameters": {
             "type": "object", "properties": {"t": {"type": "string", "maxLength": 4}},
             "required": ["t"]}}}]
TOOL_SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
TOOL_CASES = {  # id -> (tool_choice, parallel_tool_calls): one call each, so it ends in time
    "t_required": ("required", False),
    "t_named": ({"type": "function", "function": {"name": "note"}}, True),
    "t_auto": ("auto", False),
}


def tool_request(choice, parallel):
    return {"messages": [{"role": "user", "content": "Answer in JSON:"}], "tools": TOOLS,
            "tool_choice": choice, "parallel_tool_calls": parallel, "max_new_tokens": 70}


def tool_calls_valid(ev, choice):
    """The `done` event's tool_calls: names among the tools, arguments valid for their schema."""
    calls = ev.get("tool_calls")
    if ev.get("event") != "done":
        return False
    if calls is None:  # text: only under auto, and then not a call's beginning
        return choice == "auto" and not ev.get("text", "").startswith("[TOOL_CALLS]")
    for c in calls:
        name = c["function"]["name"]
        if isinstance(choice, dict) and name != choice["function"]["name"]:
            return False
        jsonschema.validate(json.loads(c["function"]["arguments"]), TOOL_SCHEMAS[name])
    return bool(calls) and ev.get("finish_reason") == "stop"


class Conn(socket_conn.Conn):
    def __init__(self, path):
        super().__init__(path, 600)

def serve(llama2, mpirun, model, np, tmp):
    sock = f"{tmp}/s{np}.sock"
    log = open(f"{tmp}/serve{np}.log", "w")
    proc = subprocess.Popen([mpirun, str(np), llama2, "serve", "--model", model, "--socket", sock,
                             "--quiet", "--max-inflight-per-connection", "256"], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(sock):
            return proc, sock
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"serve -np {np} did not start: " + open(f"{tmp}/serve{np}.log").read())


def run_all(conn, requests):
    """Sends every request at once; returns id -> the `done` or `error` event."""
    for rid, fields in requests.items():
        request = dict({"op": "generate", "id": rid, "prompt": "Answer in JSON:", "temperature": 0,
                        "max_new_tokens": MAX_NEW, "stream": False, "logprobs": True,
                        "top_logprobs": 2}, **fields)
        if "messages" in fields:
            del request["prompt"]
        conn.send(request)
    out = {}
    while len(out) < len(requests):
        ev = conn.recv()
        if ev.get("event") in ("done", "error"):
            out[ev["id"]] = ev
    return out


def main():
    llama2, mpirun, model = sys.argv[1:4]
    nps = [int(x) for x in sys.argv[4:]] or [1, 2, 4]
    cases = schemas(200)
    requests = {f"s{i}": {"response_format": {"type": "json_schema",
                                               "json_schema": {"name": f"s{i}", "schema": s}}}
                for i, s in enumerate(cases)}
    requests.update({f"x{i}": fields for i, (fields, _) in enumerate(EXTRA)})
    requests.update({k: tool_request(*v) for k, v in TOOL_CASES.items()})
    passed = failed = 0

    def check(cond, what):
        nonlocal passed, failed
        print(("ok: " if cond else "FAIL: ") + what, flush=True)
        passed += bool(cond)
        failed += not cond

    first = None
    with tempfile.TemporaryDirectory() as tmp:
        for np in nps:
            proc, sock = serve(llama2, mpirun, model, np, tmp)
            try:
                t0 = time.time()
                conn = Conn(sock)
                got = run_all(conn, requests)
                secs = time.time() - t0
                errors = [(k, v.get("message")) for k, v in got.items() if v["event"] == "error"]
                check(not errors, f"np={np}: every request done ({errors[:3]})")
                rows = [got[f"s{i}"] for i in range(len(cases))]
                stops = [i for i, r in enumerate(rows) if r.get("finish_reason") == "stop"]
                others = {r.get("finish_reason") for r in rows if r.get("finish_reason") != "stop"}
                share = len(stops) / len(rows)
                check(share >= 0.9 and others <= {"length"},
                      f"np={np}: {len(stops)}/{len(rows)} schemas end with stop ({share:.1%}), "
                      f"the rest {sorted(others) or 'none'} ({secs:.1f} s)")
                bad = []
                for i in stops:
                    try:
                        jsonschema.Draft202012Validator(cases[i]).validate(json.loads(rows[i]["text"]))
                    except (ValueError, jsonschema.ValidationError) as e:
                        bad.append(f"schema {i} {json.dumps(cases[i])}: {rows[i]['text']!r}: "
                                   f"{str(e).splitlines()[0]}")
                check(not bad, f"np={np}: all {len(stops)} stop outputs validate with jsonschema"
                      + "".join("\n    " + b for b in bad[:10]))
                for i, (fields, ok) in enumerate(EXTRA):
                    ev = got[f"x{i}"]
                    text = ev.get("text", "")
                    valid = ev.get("finish_reason") == "stop" and bool(ok(text))
                    check(valid, f"np={np}: {list(fields)[0]} output {text!r} "
                                 f"({ev.get('finish_reason')}) matches")
                for k, (choice, _) in TOOL_CASES.items():
                    ev = got[k]
                    check(tool_calls_valid(ev, choice),
                          f"np={np}: {k}: {ev.get('tool_calls') or ev.get('text')!r} "
                          f"({ev.get('finish_reason')})")
                ids = {k: (v.get("token_ids"), v.get("logprobs")) for k, v in got.items()}
                # Logprobs of the masked distribution (each rank masks its slice before its
                # log-sum-exp): a constrained token's logprob is <= 0 and equal across TP degrees.
                check(all(x <= 1e-6 for _, lps in ids.values() for x in lps or []),
                      f"np={np}: logprobs <= 0")
                if first is None:
                    first = ids
                else:
                    diff = [k for k in ids if ids[k][0] != first[k][0]]
                    check(not diff, f"np={np}: token ids equal np={nps[0]}'s for all "
                                    f"{len(ids)} requests (differ: {diff[:5]})")
                    far = [k for k in ids if ids[k][0] == first[k][0] and any(
                        abs(x - y) > 1e-3 for x, y in zip(ids[k][1] or [], first[k][1] or []))]
                    check(not far, f"np={np}: logprobs within 1e-3 of np={nps[0]}'s "
                                   f"(differ: {far[:5]})")
                conn.send({"op": "generate", "id": "bad", "prompt": "x",
                           "response_format": {"type": "json_schema", "json_schema": {
                               "name": "bad", "schema": {"type": "integer", "not": {"const": 3}}}}})
                ev = conn.recv()
                check(ev.get("event") == "error" and ev.get("code") == "invalid_request"
                      and "not" in ev.get("message", ""),
                      f"np={np}: unsupported keyword refused: {ev.get('message')}")
                bad = tool_request({"type": "function", "function": {"name": "nope"}}, True)
                ev = run_all(conn, {"badtool": bad})["badtool"]
                check(ev.get("event") == "error" and ev.get("code") == "invalid_request"
                      and "not among" in ev.get("message", ""),
                      f"np={np}: a tool_choice naming no tool refused: {ev.get('message')}")
                after = run_all(conn, {"after": {"choice": ["yes", "no"]}})["after"]
                check(after.get("text") in ("yes", "no"), f"np={np}: server still serves")
            finally:
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
