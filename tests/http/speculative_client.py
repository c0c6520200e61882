"""The client half of tests/http/speculative_serve.sh: argv = the speculating server's socket, the
plain server's socket, and the speculating server's HTTP port (empty: no HTTP checks)."""
import json
import os
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import socket_conn  # noqa: E402  (tests/socket_conn.py)

SPEC, PLAIN, PORT = sys.argv[1], sys.argv[2], sys.argv[3]
PASSAGE = ("The SELECT statement retrieves rows from one or more tables. A WHERE clause filters "
           "the rows, and an ORDER BY clause sorts them. The result is a table of its own.")
QUOTE = PASSAGE + " The SELECT statement retrieves rows"
PROMPTS = [QUOTE, "Python is a programming language that", PASSAGE + " " + PASSAGE, "A WHERE clause"]


class Conn(socket_conn.Conn):
    def __init__(self, path):
        super().__init__(path, 120)

    def generate_all(self, reqs):
        """Sends every request at once (they run together), returns their done events by id."""
        for r in reqs:
            self.send(dict({"op": "generate", "max_new_tokens": 40, "temperature": 0,
                            "ignore_eos": True, "stream": False}, **r))
        done = {}
        while len(done) < len(reqs):
            ev = self.recv()
            assert ev["event"] == "done", ev
            done[ev["id"]] = ev
        return done

    def op(self, name):
        self.send({"op": name})
        return self.recv()


spec = Conn(SPEC)
on = spec.generate_all([{"id": f"on{i}", "prompt": p} for i, p in enumerate(PROMPTS)])
off = spec.generate_all([{"id": f"off{i}", "prompt": p, "speculative": False}
                         for i, p in enumerate(PROMPTS)])
accepted = 0
for i in range(len(PROMPTS)):
    a, b = on[f"on{i}"], off[f"off{i}"]
    assert a["token_ids"] == b["token_ids"] and a["text"] == b["text"], (i, a, b)
    assert a["speculative"]["status"] == "on", a
    assert b["speculative"] == {"status": "opted_out"}, b
    accepted += a["speculative"]["accepted_tokens"]
assert on["on0"]["speculative"]["accepted_tokens"] > 0, on["on0"]
print(f"socket: 4 greedy requests in flight equal to their opt-outs, {accepted} proposals accepted")

health = spec.op("health")["speculative"]
assert health["accepted_tokens"] == accepted and health["proposed_tokens"] > 0, health
assert 0 < health["acceptance_rate"] <= 1 and health["tokens_per_verify_step"] >= 1, health
stats = spec.op("stats")["text"]
assert f"llama2_spec_decode_accepted_tokens_total {accepted}" in stats, stats
print(f"health and stats: acceptance {health['acceptance_rate']:.3f}, "
      f"{health['tokens_per_verify_step']:.2f} tokens per verify step")

plain = Conn(PLAIN).generate_all([{"id": "asked", "prompt": QUOTE, "speculative": True}])["asked"]
assert plain["speculative"] == {"status": "unavailable"}, plain
assert plain["token_ids"] == on["on0"]["token_ids"], plain
print("a server without --speculative: unavailable, same tokens")

if PORT:
    import openai

    base = f"http://127.0.0.1:{PORT}"
    client = openai.OpenAI(base_url=base + "/v1", api_key="none", max_retries=0)
    kw = dict(model="docs-8m", temperature=0, max_tokens=40)
    c_on = client.completions.create(prompt=QUOTE, **kw)
    c_off = client.completions.create(prompt=QUOTE, extra_body={"speculative": False}, **kw)
    assert c_on.choices[0].text == c_off.choices[0].text == on["on0"]["text"]
    assert c_on.choices[0].model_extra["speculative"]["accepted_tokens"] > 0, c_on
    assert c_off.choices[0].model_extra["speculative"] == {"status": "opted_out"}, c_off
    msgs = [{"role": "user", "content": "Repeat: " + PASSAGE}]
    ch_on = client.chat.completions.create(messages=msgs, **kw)
    ch_off = client.chat.completions.create(messages=msgs, extra_body={"speculative": False}, **kw)
    assert ch_on.choices[0].message.content == ch_off.choices[0].message.content
    assert ch_on.choices[0].model_extra["speculative"]["status"] == "on"
    with urllib.request.urlopen(base + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert "llama2_spec_decode_acceptance_rate" in metrics
    print("HTTP (openai client): completion and chat equal to their opt-outs; /metrics")
