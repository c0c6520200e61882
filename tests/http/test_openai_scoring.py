"""Scoring for evaluations through the official openai client (tests/http/scoring.sh starts the
server on models/docs-8m and writes the references: `llama2 perplexity` on each text)."""
import json
import math
import os
import urllib.request

import openai
import pytest

BASE = os.environ["BASE"]
MODEL = os.environ["MODEL"]
REFS = [json.loads(line) for line in open(os.environ["REFS"])]
REF = REFS[-1]  # "Once upon a time, ..."
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0)


def get(path):
    with urllib.request.urlopen(BASE + path, timeout=30) as r:
        return json.load(r)


def post(path, body):
    req = urllib.request.Request(BASE + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def close(got, want, rel=1e-5):
    return abs(got - want) <= rel * abs(want)


def refused(call):
    with pytest.raises(openai.BadRequestError) as e:
        call()
    return e.value


def test_tokenizer_info_in_vllms_shape():
    info = get("/tokenizer_info")
    assert info["tokenizer_class"] == "LlamaTokenizer"
    assert info["bos_token"] == "<s>" and info["eos_token"] == "</s>"
    assert info["add_bos_token"] is True
    assert info["model_max_length"] == 512
    ids = post("/tokenize", {"prompt": REF["text"], "add_special_tokens": False})["tokens"]
    assert len(ids) + 1 == REF["tokens"]
    assert post("/detokenize", {"tokens": ids})["prompt"] == REF["text"]


def test_echo_with_logprobs_scores_the_prompt_alone():
    r = client.completions.create(model=MODEL, prompt=REF["text"], echo=True, logprobs=1, max_tokens=0)
    c = r.choices[0]
    assert c.text == REF["text"]
    assert c.finish_reason == "length"
    assert r.usage.completion_tokens == 0 and r.usage.prompt_tokens == REF["tokens"]
    lp = c.logprobs
    assert len(lp.tokens) == REF["tokens"] == len(lp.token_logprobs) == len(lp.text_offset)
    assert lp.tokens[0] == "<s>" and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert close(sum(lp.token_logprobs[1:]), REF["loglikelihood"])
    for tok, top in zip(lp.token_logprobs[1:], lp.top_logprobs[1:]):
        assert len(top) == 1 and max(top.values()) >= tok - 1e-6
    assert lp.text_offset == sorted(lp.text_offset)


def test_echo_of_token_ids_and_one_new_token_as_lm_eval_asks():
    ids = post("/tokenize", {"prompt": REF["text"]})["tokens"]  # <s> first
    r = client.completions.create(model=MODEL, prompt=[ids], echo=True, logprobs=1, max_tokens=1, temperature=0, seed=1234)
    c = r.choices[0]
    assert c.text.startswith(REF["text"])
    lp = c.logprobs
    assert len(lp.token_logprobs) == len(ids) + 1
    assert close(sum(lp.token_logprobs[1:-1]), REF["loglikelihood"])
    # The new token is greedy: its logprob is its step's best.
    assert math.isclose(lp.token_logprobs[-1], max(lp.top_logprobs[-1].values()), abs_tol=1e-6)
    assert r.usage.completion_tokens == 1


def test_prompt_logprobs_vllm_shape_completions_and_chat():
    r = client.completions.create(model=MODEL, prompt=REF["text"], max_tokens=0, extra_body={"prompt_logprobs": 2}).model_dump()
    c = r["choices"][0]
    assert c["text"] == "" and c["logprobs"] is None
    pl = c["prompt_logprobs"]
    assert len(pl) == REF["tokens"] and pl[0] is None
    ids = post("/tokenize", {"prompt": REF["text"]})["tokens"]
    total = 0.0
    for tok, entry in zip(ids[1:], pl[1:]):
        mine = entry[str(tok)]
        total += mine["logprob"]
        assert mine["rank"] >= 1 and isinstance(mine["decoded_token"], str)
        assert 2 <= len(entry) <= 3
        best = [e for e in entry.values() if e["rank"] == 1]
        assert len(best) == 1 and best[0]["logprob"] >= mine["logprob"]
    assert close(total, REF["loglikelihood"])
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                          extra_body={"prompt_logprobs": 0}).model_dump()
    assert len(chat["prompt_logprobs"]) == chat["usage"]["prompt_tokens"]
    assert chat["prompt_logprobs"][0] is None and all(len(e) == 1 for e in chat["prompt_logprobs"][1:])


def test_scoring_refusals_name_their_param():
    e = refused(lambda: client.completions.create(model=MODEL, prompt="x", extra_body={"prompt_logprobs": 1000}))
    assert e.param == "prompt_logprobs" and "[0, 20]" in e.body["message"]
    e = refused(lambda: client.completions.create(model=MODEL, prompt="x", max_tokens=0))
    assert e.param == "max_tokens"
    e = refused(lambda: client.completions.create(model=MODEL, prompt="x", echo=True, logprobs=1, stream=True))
    assert e.param == "echo"


def test_echo_in_a_stream_sends_the_prompt_first():
    chunks = list(client.completions.create(model=MODEL, prompt="Once upon", echo=True, max_tokens=3,
                                            temperature=0, stream=True))
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert chunks[0].choices[0].text == "Once upon"
    assert text.startswith("Once upon") and len(text) > len("Once upon")
