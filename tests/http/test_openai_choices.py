"""`n` and batched prompts through the official openai client (issue 35, point 2); the server is
tests/http/scoring.sh's (models/docs-8m, --max-batch-size 4, --max-queue 8)."""
import json
import os
import random
import urllib.request

import openai
import pytest

BASE = os.environ["BASE"]
MODEL = os.environ["MODEL"]
client = openai.OpenAI(base_url=BASE + "/v1", api_key="none", max_retries=0)
SAMPLED = {"model": MODEL, "temperature": 1.0, "max_tokens": 8, "extra_body": {"ignore_eos": True}}


def metric(name):
    with urllib.request.urlopen(BASE + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise KeyError(name)


def one(prompt, seed):
    return client.completions.create(**SAMPLED, prompt=prompt, seed=seed).choices[0].text


def test_n_choices_are_seed_plus_i_and_usage_counts_the_prompt_once():
    r = client.completions.create(**SAMPLED, prompt="The server keeps", n=3, seed=11)
    assert [c.index for c in r.choices] == [0, 1, 2]
    assert [c.text for c in r.choices] == [one("The server keeps", 11 + i) for i in range(3)]
    single = client.completions.create(**SAMPLED, prompt="The server keeps", seed=11)
    assert r.usage.prompt_tokens == single.usage.prompt_tokens
    assert r.usage.completion_tokens == 3 * 8


def test_batched_prompts_times_n_are_indexed_prompt_by_n():
    prompts = ["A model directory", [1, 450, 1923]]
    r = client.completions.create(**SAMPLED, prompt=prompts, n=2, seed=3)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    for c in r.choices:
        assert c.text == one(prompts[c.index // 2], 3 + c.index % 2)
    assert r.usage.completion_tokens == 4 * 8
    assert r.usage.prompt_tokens == sum(client.completions.create(**SAMPLED, prompt=p, seed=1).usage.prompt_tokens for p in prompts)


def test_streamed_n_chat_matches_the_whole_answer():
    args = {**SAMPLED, "messages": [{"role": "user", "content": "Tell me about the cache."}], "n": 2, "seed": 21}
    whole = client.chat.completions.create(**args)
    texts, roles, finished, usage = {0: "", 1: ""}, set(), set(), None
    for ch in client.chat.completions.create(**args, stream=True, stream_options={"include_usage": True}):
        if ch.usage:
            usage = ch.usage
        for c in ch.choices:
            if c.delta.role:
                roles.add(c.index)
            texts[c.index] += c.delta.content or ""
            if c.finish_reason:
                finished.add(c.index)
    assert roles == finished == {0, 1}
    assert [texts[0], texts[1]] == [c.message.content for c in whole.choices]
    assert usage.completion_tokens == whole.usage.completion_tokens == 16
    assert usage.prompt_tokens == whole.usage.prompt_tokens


def test_n_shares_the_prompts_kv_blocks_prefilled_once():
    words = "queue rank step block cache token prompt model layer head weight scale".split()
    rng = random.Random()
    prompt = " ".join(rng.choice(words) for _ in range(80))  # fresh: nothing cached yet
    hits0, queries0 = metric("llama2_prefix_cache_hits_total"), metric("llama2_prefix_cache_queries_total")
    r = client.completions.create(**SAMPLED, prompt=prompt, n=4, seed=5)
    n_prompt = r.usage.prompt_tokens
    hits = metric("llama2_prefix_cache_hits_total") - hits0
    queries = metric("llama2_prefix_cache_queries_total") - queries0
    full = (n_prompt - 1) // 16 * 16  # the followers find the leader's full blocks (16 tokens each)
    assert queries == 4 * n_prompt, (queries, n_prompt)
    assert hits == 3 * full, (hits, full, n_prompt)


def test_n_limits_and_admission_counts_every_sequence():
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(**SAMPLED, prompt="x", n=17)
    assert e.value.param == "n"
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**{**SAMPLED, "messages": [{"role": "user", "content": "x"}], "n": 0})
    assert e.value.param == "n"
    # --max-queue 8: 9 sequences cannot all be queued, so none is; then the places are back.
    with pytest.raises(openai.RateLimitError) as e:
        client.completions.create(**SAMPLED, prompt=["x", "y", "z"], n=3)
    assert e.value.code == "queue_full"
    assert len(client.completions.create(**SAMPLED, prompt=["x", "y"], n=4).choices) == 8
