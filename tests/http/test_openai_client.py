"""The official OpenAI Python client against a real `mpirun -np 2 llama2 serve --http`.

tests/http/openai_client.sh starts the server on the CPU backend and runs this file with pytest from
the repository's .venv (openai and pytest pinned in launch/requirements-test.txt), passing BASE
(http://127.0.0.1:PORT), API_KEY, MODEL and its alias ALIAS (--served-model-name MODEL,ALIAS),
MAX_SEQ_LEN (its --max-seq-len), TOKENIZER (the model's tokenizer.model), SERVER_PID (rank 0), and
STRICT_BASE: a second server on the same model with --strict-api and --request-timeout-ms 2000
(steps of at least 5 ms). The
tests run in file order and depend on it: the 429 test fills the queue that /metrics later counts,
and the last test drains the server with SIGTERM and checks 503.
"""

import json
import math
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx2  # the openai client's own HTTP library, for the endpoints it has no method for
import jsonschema
import openai
import pydantic
import pytest
import sentencepiece

BASE = os.environ["BASE"]
API_KEY = os.environ["API_KEY"]
MODEL = os.environ["MODEL"]
ALIAS = os.environ["ALIAS"]
MAX_SEQ_LEN = int(os.environ["MAX_SEQ_LEN"])
STRICT_BASE = os.environ["STRICT_BASE"]
TIMEOUT = 60.0
AUTH = {"Authorization": f"Bearer {API_KEY}"}

# No retries: a refusal (429, 503) must reach the test as it was sent, not be retried away.
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT)
# ignore_eos is llama2's extension (as vLLM's): the client sends what it does not know in extra_body.
GREEDY = {"model": MODEL, "temperature": 0, "max_tokens": 24, "extra_body": {"ignore_eos": True}}
CHAT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Tell me about the cache."}]
# Long enough (~1 ms a token) to be cancelled, queued behind or drained while it runs.
LONG = {"model": MODEL, "prompt": "Once", "max_tokens": 450, "extra_body": {"ignore_eos": True}}
CANCELLED = 'llama2_requests_total{finish_reason="cancelled"}'


def refused(call):
    """The error of a call the server refuses: the client raises APIStatusError (status, body)."""
    with pytest.raises(openai.APIStatusError) as info:
        call()
    return info.value


class Metrics:
    """One scrape of GET /metrics (Prometheus text; no key needed)."""

    def __init__(self):
        response = httpx2.get(f"{BASE}/metrics", timeout=TIMEOUT)
        response.raise_for_status()
        self.text = response.text

    def value(self, name):
        """The first sample of `name` (a bare name or one with its labels), None when absent."""
        for line in self.text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.split(" ")[-1])
        return None


def wait_for_cancel(before):
    """The first scrape whose cancelled-requests counter passed `before` (20 s at most)."""
    assert before is not None, f"/metrics lacks {CANCELLED}"
    until = time.monotonic() + 20
    while True:
        metrics = Metrics()
        if metrics.value(CANCELLED) > before:
            return metrics
        assert time.monotonic() < until, "the generation was not cancelled within 20 s"
        time.sleep(0.05)


def test_completions_non_streamed_greedy_usage():
    r = client.completions.create(**GREEDY, prompt="Once upon a time")
    assert r.object == "text_completion"
    assert r.model == MODEL
    assert len(r.choices) == 1
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 24
    assert r.usage.prompt_tokens >= 5
    assert len(r.choices[0].text) > 0


def test_completions_token_id_prompt_streamed_text_equals_non_streamed():
    whole = client.completions.create(**GREEDY, prompt=[1, 15, 27, 300])
    assert whole.usage.prompt_tokens == 4
    text, finish = "", None
    for chunk in client.completions.create(**GREEDY, prompt=[1, 15, 27, 300], stream=True):
        if chunk.choices:
            text += chunk.choices[0].text or ""
            finish = chunk.choices[0].finish_reason or finish
    assert text == whole.choices[0].text
    assert finish == "length"


def test_chat_non_streamed_and_streamed_agree_include_usage_adds_usage_chunk():
    whole = client.chat.completions.create(**GREEDY, messages=CHAT)
    assert whole.object == "chat.completion"
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens == 24
    stream = client.chat.completions.create(**GREEDY, messages=CHAT, stream=True,
                                            stream_options={"include_usage": True})
    text, role, usage, chunks = "", None, None, 0
    for chunk in stream:
        chunks += 1
        assert chunk.object == "chat.completion.chunk"
        if chunk.choices:
            role = chunk.choices[0].delta.role or role
            text += chunk.choices[0].delta.content or ""
        if chunk.usage:
            usage = chunk.usage
    assert role == "assistant"
    assert text == whole.choices[0].message.content
    assert usage is not None, "no usage chunk"
    # The same prompt again: its prefix is cached now, the rest of the usage is the same.
    assert usage.prompt_tokens_details.cached_tokens > whole.usage.prompt_tokens_details.cached_tokens
    assert usage.model_dump(exclude={"prompt_tokens_details"}) == whole.usage.model_dump(
        exclude={"prompt_tokens_details"})
    assert chunks > 3, f"a stream of {chunks} chunks"


def test_stop_strings_end_the_text_before_the_stop_string_with_finish_reason_stop():
    request = {**GREEDY, "prompt": "The cache", "max_tokens": 40}
    text = client.completions.create(**request).choices[0].text
    # A 3-character window from the middle on, with no whitespace (the model is random).
    at = len(text) // 2
    while at + 3 <= len(text) and re.search(r"\s", text[at:at + 3]):
        at += 1
    stop = text[at:at + 3]
    assert len(stop) == 3, f"a stop string from {text!r}"
    cut = client.completions.create(**request, stop=[stop, "zzzz"])
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[:text.index(stop)]


def test_seed_reproducibility_same_seed_same_text_another_seed_another():
    request = {"model": MODEL, "messages": CHAT, "temperature": 1.0, "top_p": 0.95, "max_tokens": 32,
               "extra_body": {"ignore_eos": True}}
    a = client.chat.completions.create(**request, seed=1234)
    b = client.chat.completions.create(**request, seed=1234)
    c = client.chat.completions.create(**request, seed=99)
    assert a.choices[0].message.content == b.choices[0].message.content
    assert a.choices[0].message.content != c.choices[0].message.content


def test_penalties_and_extensions_accepted_models_lists_the_served_name():
    r = client.chat.completions.create(
        **{**GREEDY, "extra_body": {"ignore_eos": True, "top_k": 5, "repetition_penalty": 1.1}},
        messages=CHAT, presence_penalty=0.5, frequency_penalty=0.5, user="someone", n=1)
    assert r.usage.completion_tokens == 24


def test_unknown_and_bookkeeping_fields_are_ignored_top_k_minus_one_is_off():
    """What Spring AI, LangChain and vLLM clients send besides the parameters: accepted (and each
    name logged once: openai_client.sh counts the log lines after this file ran twice over them)."""
    bookkeeping = {"store": True, "metadata": {"app": "test"}, "service_tier": "auto", "reasoning_effort": "low",
                   "user": "someone", "parallel_tool_calls": False}
    for _ in range(2):
        r = client.chat.completions.create(
            **{**GREEDY, "extra_body": {"ignore_eos": True, "top_k": -1, "priority": 0, "spaces_between_special_tokens": True}},
            messages=CHAT, **bookkeeping)
        assert r.usage.completion_tokens == 24
    plain = client.chat.completions.create(**GREEDY, messages=CHAT)
    assert r.choices[0].message.content == plain.choices[0].message.content  # top_k -1: off, as no top_k
    c = client.completions.create(**{**GREEDY, "extra_body": {"ignore_eos": True, "store": True,
                                                              "metadata": {"a": "b"}}}, prompt="Once")
    assert c.usage.completion_tokens == 24


def test_strict_api_refuses_unknown_fields_and_still_takes_the_known_ones():
    strict = openai.OpenAI(base_url=f"{STRICT_BASE}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT)
    e = refused(lambda: strict.chat.completions.create(**GREEDY, messages=CHAT, store=True))
    assert e.status_code == 400
    assert e.param == "store"
    assert "--strict-api" in e.body["message"]
    r = strict.chat.completions.create(**{**GREEDY, "max_tokens": 4}, messages=CHAT, user="someone", n=1)
    assert r.usage.completion_tokens == 4


def test_output_changing_fields_are_refused_naming_them():
    cases = [({"use_beam_search": True}, "use_beam_search"),
             ({"bad_words": ["x"]}, "bad_words"),
             ({"functions": [{"name": "f", "parameters": {}}]}, "functions"),
             ({"return_tokens_as_token_ids": True}, "return_tokens_as_token_ids")]
    for extra, param in cases:
        e = refused(lambda: client.chat.completions.create(**{**GREEDY, "extra_body": extra}, messages=CHAT))
        assert (e.status_code, e.param, e.code) == (400, param, "unsupported_parameter"), extra
    # Their harmless values change nothing and pass.
    client.chat.completions.create(**{**GREEDY, "extra_body": {"bad_words": []}}, messages=CHAT, tool_choice="none",
                                   response_format={"type": "text"})


SP = sentencepiece.SentencePieceProcessor(model_file=os.environ["TOKENIZER"])
PROMPT_IDS = [1, 45, 70, 33]


def completion(n, **extra):
    """A greedy completion of PROMPT_IDS (n tokens at most, EOS ignored) with logprobs: its tokens."""
    return client.completions.create(model=MODEL, prompt=PROMPT_IDS, temperature=0, max_tokens=n, logprobs=0,
                                     extra_body={"ignore_eos": True, **extra})


def token_ids(choice):
    """The ids of a choice's tokens, from their logprobs strings (the server writes U+2581 as a space and
    ASCII byte pieces as their character). None where that is ambiguous: a one-character ASCII string is
    both a piece and a byte token in this vocabulary."""
    ids = []
    for text in choice.logprobs.tokens:
        i = SP.piece_to_id(text.replace(" ", "\u2581"))
        if len(text) == 1 and ord(text) < 0x80:
            ids.append(None)
            continue
        assert i != SP.unk_id(), text
        ids.append(i)
    return ids


def test_logit_bias_forces_or_bans_a_token_through_two_ranks():
    greedy = completion(6).choices[0]
    first = token_ids(greedy)
    assert len(first) == 6
    # +100 on a token outside the greedy output: every step picks it (each rank biases its own slice of the
    # vocabulary before the argmax, so the tensor-parallel reduction sees the bias).
    forced = next(i for i in range(300, SP.get_piece_size())
                  if i not in first and len(SP.id_to_piece(i)) > 1
                  and not (SP.is_control(i) or SP.is_byte(i) or SP.is_unknown(i)))
    r = completion(5, logit_bias={str(forced): 100}).choices[0]
    assert token_ids(r) == [forced] * 5
    # -100 on the greedy first token: another first token.
    assert first[0] is not None, greedy.logprobs.tokens
    banned = completion(6, logit_bias={str(first[0]): -100}).choices[0]
    assert banned.logprobs.tokens[0] != greedy.logprobs.tokens[0]
    # The openai client's own logit_bias argument is the same object.
    typed = client.completions.create(model=MODEL, prompt=PROMPT_IDS, temperature=0, max_tokens=3, logprobs=0,
                                      logit_bias={str(forced): 100}, extra_body={"ignore_eos": True})
    assert token_ids(typed.choices[0]) == [forced] * 3
    e = refused(lambda: completion(2, logit_bias={str(SP.get_piece_size() + 10**6): 1}))
    assert (e.status_code, e.param) == (400, "logit_bias")
    e = refused(lambda: completion(2, logit_bias={"5": 150}))
    assert (e.status_code, e.param) == (400, "logit_bias")
    assert "[-100, 100]" in e.body["message"]


def test_stop_token_ids_end_with_stop_and_min_tokens_holds_them_back():
    greedy = completion(6).choices[0]
    ids = token_ids(greedy)
    # The first token after the first that is new ends the output there: reported as stop, its text left out.
    k = next(k for k in range(1, 6) if ids[k] is not None and ids[k] not in ids[:k])
    r = completion(6, stop_token_ids=[ids[k]])
    assert r.choices[0].finish_reason == "stop"
    assert r.usage.completion_tokens == k + 1
    assert r.choices[0].text == completion(k).choices[0].text
    # The first greedy token as a stop id ends at once; with min_tokens 3 it cannot end before 3 tokens.
    assert ids[0] is not None, greedy.logprobs.tokens
    assert completion(6, stop_token_ids=[ids[0]]).usage.completion_tokens == 1
    held = completion(8, stop_token_ids=[ids[0]], min_tokens=3)
    assert held.usage.completion_tokens >= 3
    assert ids[0] not in token_ids(held.choices[0])[:3]
    for bad, param in [({"stop_token_ids": [-1]}, "stop_token_ids"), ({"min_tokens": -2}, "min_tokens"),
                       ({"min_p": 1.5}, "min_p"), ({"skip_special_tokens": "no"}, "skip_special_tokens")]:
        e = refused(lambda: completion(2, **bad))
        assert (e.status_code, e.param) == (400, param), bad


def test_include_stop_str_in_output_and_min_p_one_is_greedy():
    text = completion(12).choices[0].text
    stop = text.strip()[3:6]
    assert len(stop) == 3
    cut = client.completions.create(model=MODEL, prompt=PROMPT_IDS, temperature=0, max_tokens=12, stop=[stop],
                                    extra_body={"ignore_eos": True})
    kept = client.completions.create(model=MODEL, prompt=PROMPT_IDS, temperature=0, max_tokens=12, stop=[stop],
                                     extra_body={"ignore_eos": True, "include_stop_str_in_output": True})
    assert kept.choices[0].text == cut.choices[0].text + stop
    assert kept.choices[0].finish_reason == "stop"
    # min_p 1 keeps only the most probable token: sampling at any temperature is greedy.
    hot = client.completions.create(model=MODEL, prompt=PROMPT_IDS, temperature=1.5, max_tokens=12, seed=3,
                                    extra_body={"ignore_eos": True, "min_p": 1.0})
    assert hot.choices[0].text == text


def test_absent_max_tokens_runs_to_the_end_of_the_context_with_finish_reason_length():
    r = client.completions.create(model=MODEL, prompt="Once", temperature=0, extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens > 128  # the old fixed default
    assert r.usage.completion_tokens == MAX_SEQ_LEN - r.usage.prompt_tokens
    chunks = list(client.chat.completions.create(model=MODEL, messages=CHAT, temperature=0, stream=True,
                                                 stream_options={"include_usage": True},
                                                 extra_body={"ignore_eos": True}))
    assert chunks[-1].usage.completion_tokens == MAX_SEQ_LEN - chunks[-1].usage.prompt_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_a_timeout_finishes_as_length_with_the_reason_in_llama2_finish_reason():
    # The strict server's --request-timeout-ms 2000 ends a 1000-token generation (5 ms steps) early.
    strict = openai.OpenAI(base_url=f"{STRICT_BASE}/v1", api_key=API_KEY, max_retries=0, timeout=TIMEOUT)
    r = strict.completions.create(model=MODEL, prompt="Once", max_tokens=1000, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.choices[0].finish_reason == "length"
    assert r.choices[0].model_extra["llama2_finish_reason"] == "timeout"
    assert r.usage.completion_tokens < 1000
    last = [c for c in strict.completions.create(model=MODEL, prompt="Once", max_tokens=1000, temperature=0,
                                                 stream=True, extra_body={"ignore_eos": True}) if c.choices][-1]
    assert last.choices[0].finish_reason == "length"
    assert last.choices[0].model_extra["llama2_finish_reason"] == "timeout"
    plain = client.completions.create(**GREEDY, prompt="Once")
    assert plain.choices[0].model_extra["llama2_finish_reason"] == "length"


def test_model_aliases_and_models_retrieve():
    assert [m.id for m in client.models.list().data] == [MODEL, ALIAS]
    assert client.models.retrieve(ALIAS).id == ALIAS
    assert client.models.retrieve(MODEL).object == "model"
    e = refused(lambda: client.models.retrieve("no-such-model"))
    assert e.status_code == 404
    assert e.code == "model_not_found"
    assert set(e.body) == {"message", "type", "param", "code"}
    r = client.chat.completions.create(**{**GREEDY, "model": ALIAS}, messages=CHAT)
    assert r.model == ALIAS
    assert r.usage.completion_tokens == 24


def test_system_fingerprint_and_cached_tokens_of_a_repeated_prompt():
    prompt = "The quick brown fox jumps over the lazy dog near the river bank. " * 6
    first = client.completions.create(**GREEDY, prompt=prompt)
    second = client.completions.create(**GREEDY, prompt=prompt)
    assert re.fullmatch(r"fp_[0-9a-f]{16}", first.system_fingerprint)
    assert second.system_fingerprint == first.system_fingerprint
    assert second.usage.prompt_tokens_details.cached_tokens > 0
    assert second.usage.prompt_tokens_details.cached_tokens < second.usage.prompt_tokens
    chunks = list(client.completions.create(**GREEDY, prompt=prompt, stream=True,
                                            stream_options={"include_usage": True}))
    assert all(c.system_fingerprint == first.system_fingerprint for c in chunks)
    assert chunks[-1].usage.prompt_tokens_details.cached_tokens > 0


def test_tokenize_and_detokenize_round_trip_sentencepiece_ids():
    sp = sentencepiece.SentencePieceProcessor(model_file=os.environ["TOKENIZER"])
    text = "Hello world: tokens, round trips and caf\u00e9!"
    r = httpx2.post(f"{BASE}/tokenize", headers=AUTH, json={"model": MODEL, "prompt": text}, timeout=TIMEOUT)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["tokens"] == [sp.bos_id()] + sp.encode(text)
    assert body["count"] == len(body["tokens"])
    assert body["max_model_len"] == MAX_SEQ_LEN
    bare = httpx2.post(f"{BASE}/tokenize", headers=AUTH, json={"prompt": text, "add_special_tokens": False},
                       timeout=TIMEOUT).json()
    assert bare["tokens"] == sp.encode(text)
    back = httpx2.post(f"{BASE}/detokenize", headers=AUTH, json={"model": MODEL, "tokens": body["tokens"]},
                       timeout=TIMEOUT)
    assert back.status_code == 200
    assert back.json() == {"prompt": text}
    # Messages: the prompt a chat completion runs, so "count" is its usage.prompt_tokens.
    chat = httpx2.post(f"{BASE}/tokenize", headers=AUTH, json={"messages": CHAT}, timeout=TIMEOUT).json()
    assert chat["count"] == client.chat.completions.create(**GREEDY, messages=CHAT).usage.prompt_tokens
    for route, bad, param in [("tokenize", {"prompt": 5}, "prompt"),
                              ("tokenize", {"messages": [{"role": "robot", "content": "x"}]}, "messages"),
                              ("detokenize", {"tokens": [1, -3]}, "tokens"),
                              ("detokenize", {"tokens": "1 2"}, "tokens")]:
        e = httpx2.post(f"{BASE}/{route}", headers=AUTH, json=bad, timeout=TIMEOUT)
        assert e.status_code == 400, (route, bad)
        assert e.json()["error"]["param"] == param
    assert httpx2.post(f"{BASE}/tokenize", json={"prompt": "x"}, timeout=TIMEOUT).status_code == 401


def test_version_health_and_ready():
    v = httpx2.get(f"{BASE}/version", timeout=TIMEOUT)
    assert v.status_code == 200
    assert re.fullmatch(r"\d+\.\d+\.\d+", v.json()["version"])
    assert httpx2.get(f"{BASE}/health", timeout=TIMEOUT).status_code == 200
    ready = httpx2.get(f"{BASE}/ready", timeout=TIMEOUT)
    assert ready.status_code == 200
    assert ready.json()["status"] == "ready"


def test_logprobs_chat_and_completions_streamed_and_not():
    """Log-probabilities of the model: <= 0, top sorted, the chosen token first when greedy."""
    r = client.chat.completions.create(**GREEDY, messages=CHAT, logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens
    for t in content:
        assert t.logprob <= 1e-6, t
        assert len(t.top_logprobs) == 3
        p = [a.logprob for a in t.top_logprobs]
        assert p[0] >= p[1] >= p[2], p
        assert sum(math.exp(x) for x in p) <= 1 + 1e-4
        assert t.top_logprobs[0].token == t.token  # greedy: the chosen token is the most probable
        assert abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6
    streamed = []
    for chunk in client.chat.completions.create(**GREEDY, messages=CHAT, logprobs=True, top_logprobs=3,
                                                stream=True):
        if chunk.choices and chunk.choices[0].logprobs:
            streamed += chunk.choices[0].logprobs.content
    assert [t.logprob for t in streamed] == [t.logprob for t in content]
    c = client.completions.create(**GREEDY, prompt="Once upon a time", logprobs=2)
    lp = c.choices[0].logprobs
    assert len(lp.tokens) == c.usage.completion_tokens
    assert len(lp.token_logprobs) == len(lp.tokens)
    assert all(1 <= len(top) <= 2 for top in lp.top_logprobs), lp.top_logprobs
    plain = client.chat.completions.create(**GREEDY, messages=CHAT)
    assert plain.choices[0].logprobs is None


def test_400_unsupported_and_invalid_parameters_in_openai_error_shape_naming_the_parameter():
    cases = [
        # Tools are read (test_tools_client.py); a bad one is refused naming them.
        ({"tools": [{"type": "function", "function": {"name": "f g", "parameters": {}}}]}, "tools"),
        ({"n": 2}, "n"),
        ({"logprobs": False, "top_logprobs": 3}, None),
        ({"logprobs": True, "top_logprobs": 21}, None),
        ({"temperature": -1}, None),
        ({"max_tokens": 0}, None),
    ]
    for extra, param in cases:
        e = refused(lambda: client.chat.completions.create(**{**GREEDY, "messages": CHAT, **extra}))
        assert e.status_code == 400, extra
        assert e.type == "invalid_request_error", extra
        assert len(e.body["message"]) > 0, extra
        if param:
            assert e.param == param
    m = refused(lambda: client.chat.completions.create(**{**GREEDY, "messages": CHAT, "max_tokens": 0}))
    assert re.search(r"max_tokens must be >= 1", m.body["message"]), m.body
    echo = refused(lambda: client.completions.create(**GREEDY, prompt="x", echo=True))
    assert echo.param == "echo"
    best_of = refused(lambda: client.completions.create(**GREEDY, prompt="x", best_of=3))
    assert best_of.param == "best_of"
    order = refused(lambda: client.chat.completions.create(**GREEDY, messages=[{"role": "assistant", "content": "hi"}]))
    assert order.status_code == 400
    long = refused(lambda: client.completions.create(**GREEDY, prompt="word " * 600))
    assert long.status_code == 400
    assert long.code == "context_length_exceeded"
    assert long.param == "prompt"
    long_chat = refused(lambda: client.chat.completions.create(
        **GREEDY, messages=[{"role": "user", "content": "word " * 600}]))
    assert (long_chat.status_code, long_chat.code, long_chat.param) == (400, "context_length_exceeded", "messages")
    top_p = refused(lambda: client.chat.completions.create(**GREEDY, messages=CHAT, top_p=1.5))
    assert top_p.param == "top_p"


# Structured output (docs/structured-output.md): bounded schemas, so that even random weights end
# the output within max_tokens; greedy, so the streamed and the whole answers are the same.
PERSON = {"type": "object",
          "properties": {"name": {"type": "string", "maxLength": 8},
                         "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"], "additionalProperties": False}
STRUCTURED = {"model": MODEL, "temperature": 0, "max_tokens": 80}


def test_response_format_json_schema_output_validates_streamed_equals_whole():
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    r = client.chat.completions.create(**STRUCTURED, messages=CHAT, response_format=fmt)
    assert r.choices[0].finish_reason == "stop", r
    jsonschema.validate(json.loads(r.choices[0].message.content), PERSON)
    chunks = client.chat.completions.create(**STRUCTURED, messages=CHAT, response_format=fmt, stream=True)
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert streamed == r.choices[0].message.content


def test_response_format_json_object_starts_an_object_and_parses_when_it_stops():
    r = client.chat.completions.create(**{**STRUCTURED, "max_tokens": 40}, messages=CHAT,
                                       response_format={"type": "json_object"})
    text = r.choices[0].message.content
    assert text.startswith("{"), text
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:
        assert r.choices[0].finish_reason == "length"


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=8)
    age: int = pydantic.Field(ge=0, le=120)


def test_parse_with_a_pydantic_model_returns_the_model():
    r = client.chat.completions.parse(**STRUCTURED, messages=CHAT, response_format=Person)
    person = r.choices[0].message.parsed
    assert isinstance(person, Person), r
    assert 0 <= person.age <= 120 and len(person.name) <= 8


def test_vllm_guided_choice_regex_and_grammar():
    r = client.completions.create(**STRUCTURED, prompt="Yes or no?", extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].text in ("yes", "no") and r.choices[0].finish_reason == "stop"
    r = client.completions.create(**STRUCTURED, prompt="A code:", extra_body={"guided_regex": "[A-F]{2}-[0-9]{3}"})
    assert re.fullmatch("[A-F]{2}-[0-9]{3}", r.choices[0].text), r.choices[0].text
    r = client.chat.completions.create(**STRUCTURED, messages=CHAT,
                                       extra_body={"structured_outputs": {"choice": ["left", "right"]}})
    assert r.choices[0].message.content in ("left", "right")
    r = client.completions.create(**STRUCTURED, prompt="x", extra_body={"grammar": 'root ::= "ab" [0-9]{1,2}'})
    assert re.fullmatch("ab[0-9]{1,2}", r.choices[0].text), r.choices[0].text


def test_400_a_schema_with_an_unsupported_keyword_names_it():
    bad = {"type": "object", "properties": {"a": {"type": "integer"}}, "patternProperties": {"^x": {}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "bad", "schema": bad}}
    e = refused(lambda: client.chat.completions.create(**STRUCTURED, messages=CHAT, response_format=fmt))
    assert e.status_code == 400 and e.type == "invalid_request_error"
    assert "patternProperties" in e.body["message"], e.body
    two = refused(lambda: client.completions.create(**STRUCTURED, prompt="x",
                                                    extra_body={"guided_regex": "a", "guided_choice": ["a"]}))
    assert two.status_code == 400 and "give at most one" in two.body["message"]


def test_401_a_wrong_or_missing_api_key():
    bad = openai.OpenAI(base_url=f"{BASE}/v1", api_key="wrong-key", max_retries=0, timeout=TIMEOUT)
    e = refused(lambda: bad.models.list())
    assert e.status_code == 401
    none = httpx2.get(f"{BASE}/v1/models", timeout=TIMEOUT)
    assert none.status_code == 401
    assert none.json()["error"]["code"] == "invalid_api_key"


def test_404_an_unknown_model_and_an_unknown_path():
    e = refused(lambda: client.chat.completions.create(**{**GREEDY, "model": "gpt-4"}, messages=CHAT))
    assert e.status_code == 404
    assert e.code == "model_not_found"
    r = httpx2.post(f"{BASE}/v1/embeddings", headers={"Authorization": f"Bearer {API_KEY}"}, content="{}",
                    timeout=TIMEOUT)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"


def test_413_a_body_over_http_max_body_bytes():
    e = refused(lambda: client.completions.create(**GREEDY, prompt="x" * 70000))
    assert e.status_code == 413
    assert e.code == "body_too_large"


def test_429_queue_full_with_retry_after_when_the_batch_and_the_queue_are_full():
    # --max-batch-size 2 --max-queue 2: of 8 long streams at once, at most 4 are taken.
    request = {"model": MODEL, "prompt": "Once", "max_tokens": 400, "temperature": 0,
               "extra_body": {"ignore_eos": True}}

    def stream():
        return sum(len(chunk.choices) for chunk in client.completions.create(**request, stream=True))

    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(stream) for _ in range(8)]
    refusals = [f.exception() for f in futures if f.exception() is not None]
    assert len(refusals) >= 4, f"{len(refusals)} of 8 refused"
    for e in refusals:
        assert isinstance(e, openai.APIStatusError), repr(e)
        assert e.status_code == 429
        assert e.code == "queue_full"
        assert e.response.headers.get("retry-after") == "1"
    assert any(f.exception() is None for f in futures)


def test_a_client_that_disconnects_mid_stream_cancels_its_generation_and_frees_its_kv_blocks():
    before = Metrics().value(CANCELLED)
    seen = 0
    # Leaving the `with` closes the stream's response: the connection goes away mid-generation.
    with client.completions.create(**LONG, stream=True) as stream:
        for chunk in stream:
            seen += len(chunk.choices)
            if seen >= 3:
                break
    metrics = wait_for_cancel(before)
    assert metrics.value("llama2_requests_running") == 0
    assert metrics.value("llama2_kv_cache_usage_ratio") == 0
    assert metrics.value("vllm:num_requests_running") == 0


def test_a_non_streamed_request_whose_client_hangs_up_is_cancelled_too():
    before = Metrics().value(CANCELLED)
    # The client gives up after 100 ms and closes the connection, long before the 450 tokens are
    # generated (a timeout is how the sync client abandons a call).
    with pytest.raises(openai.APITimeoutError):
        client.completions.create(**LONG, timeout=0.1)
    wait_for_cancel(before)


def test_health_is_200_when_ready_metrics_has_the_vllm_names():
    h = httpx2.get(f"{BASE}/health", timeout=TIMEOUT)
    assert h.status_code == 200
    assert h.json()["status"] == "ready"
    metrics = Metrics()
    for name in ["vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "vllm:time_to_first_token_seconds_bucket",
                 "vllm:e2e_request_latency_seconds_count", "vllm:generation_tokens_total",
                 "llama2_requests_rejected_total"]:
        assert name in metrics.text, f"/metrics lacks {name}"
    assert metrics.value('llama2_requests_rejected_total{code="queue_full"}') >= 4


def test_503_while_draining_in_flight_streams_finish_new_requests_are_refused():
    server_pid = int(os.environ["SERVER_PID"])
    stream = client.completions.create(**{**LONG, "max_tokens": 300}, stream=True)
    chunks = iter(stream)
    next(chunks)
    os.kill(server_pid, signal.SIGTERM)
    until = time.monotonic() + 20
    while True:
        ready = httpx2.get(f"{BASE}/ready", timeout=TIMEOUT)
        if ready.status_code != 200:
            break
        assert time.monotonic() < until, "/ready never reported draining"
    assert ready.status_code == 503
    assert ready.json()["status"] == "draining"
    # /health is liveness: the process still serves (its streams finish), so 200.
    health = httpx2.get(f"{BASE}/health", timeout=TIMEOUT)
    assert health.status_code == 200
    assert health.json()["status"] == "draining"
    e = refused(lambda: client.completions.create(**GREEDY, prompt="late"))
    assert e.status_code == 503
    assert e.code == "shutting_down"
    finish = None
    for chunk in chunks:
        if chunk.choices:
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "length"
