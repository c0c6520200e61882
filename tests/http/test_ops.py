"""The HTTP front's operations basics through the official OpenAI Python client (issue 35 point 6),
against the server tests/http/openai_client.sh starts (--access-log json, --api-key-file KEY_FILE
beside $LLAMA2_API_KEY, --allowed-origins ORIGIN). It runs before test_openai_client.py, whose
last test drains the server; openai_client.sh then reads the access log this file's requests
wrote (request ids OPS_*).
Environment: BASE, API_KEY, MODEL, KEY_FILE (holding FILE_KEY), ORIGIN, SERVER_PID (rank 0),
SERVE_LOG (the server's stderr).
"""

import os
import re
import signal
import time

import httpx2
import openai
import pytest

BASE = os.environ["BASE"]
API_KEY = os.environ["API_KEY"]
MODEL = os.environ["MODEL"]
KEY_FILE = os.environ["KEY_FILE"]
FILE_KEY = os.environ["FILE_KEY"]
ORIGIN = os.environ["ORIGIN"]
TIMEOUT = 60.0
GREEDY = {"model": MODEL, "temperature": 0, "max_tokens": 6, "extra_body": {"ignore_eos": True}}


def client_with(key):
    return openai.OpenAI(base_url=f"{BASE}/v1", api_key=key, max_retries=0, timeout=TIMEOUT)


client = client_with(API_KEY)


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.split(" ")[-1])
    return None


def test_x_request_id_is_echoed_and_is_the_completion_ids_suffix():
    raw = client.completions.with_raw_response.create(
        **GREEDY, prompt="Once", extra_headers={"X-Request-Id": "OPS_plain-1"})
    assert raw.headers["x-request-id"] == "OPS_plain-1"
    assert raw.parse().id == "cmpl-OPS_plain-1"
    with client.chat.completions.with_streaming_response.create(
            **GREEDY, messages=[{"role": "user", "content": "Hi"}], stream=True,
            extra_headers={"X-Request-Id": "OPS_stream-2"}) as response:
        assert response.headers["x-request-id"] == "OPS_stream-2"
        ids = {chunk.id for chunk in response.parse()}
    assert ids == {"chatcmpl-OPS_stream-2"}


def test_a_request_id_with_other_characters_is_replaced_and_one_is_generated_when_absent():
    raw = client.completions.with_raw_response.create(
        **GREEDY, prompt="Once", extra_headers={"X-Request-Id": "OPS bad\"id"})
    replaced = raw.headers["x-request-id"]
    assert re.fullmatch(r"[0-9a-f]{32}", replaced), replaced
    assert raw.parse().id == "cmpl-" + replaced
    long_id = "OPS_" + "x" * 200  # past 128 characters
    raw = client.models.with_raw_response.list(extra_headers={"X-Request-Id": long_id})
    assert re.fullmatch(r"[0-9a-f]{32}", raw.headers["x-request-id"])
    plain = httpx2.get(f"{BASE}/health", timeout=TIMEOUT)
    assert re.fullmatch(r"[0-9a-f]{32}", plain.headers["x-request-id"])


def test_an_x_request_id_of_10_kb_gets_a_400_naming_it():
    with pytest.raises(openai.APIStatusError) as info:
        client.completions.create(**GREEDY, prompt="Once", extra_headers={"X-Request-Id": "a" * 10240})
    e = info.value
    assert (e.status_code, e.param) == (400, "X-Request-Id")
    assert "10240 bytes" in e.body["message"]


def test_any_key_of_the_key_file_is_let_in_a_wrong_one_gets_401():
    assert client_with(FILE_KEY).models.list().data[0].id == MODEL
    assert client.models.list().data[0].id == MODEL  # $LLAMA2_API_KEY as well
    with pytest.raises(openai.AuthenticationError):
        client_with(FILE_KEY + "x").models.list()


def test_a_refused_post_leaves_its_connection_usable():
    """A body refused before it was read (401 here) must not be read as the next request."""
    body = {"model": MODEL, "prompt": "Once", "max_tokens": 2}
    with httpx2.Client(base_url=BASE, timeout=TIMEOUT) as http:  # one keep-alive connection
        for key, status in [("wrong", 401), (API_KEY, 200), ("wrong", 401), (FILE_KEY, 200)]:
            r = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {key}"})
            assert r.status_code == status, r.text


def wait_for_key(key, allowed):
    """The key's answer becomes `allowed` (200) or refused (401) within 20 s."""
    until = time.monotonic() + 20
    while True:
        status = httpx2.get(f"{BASE}/v1/models", headers={"Authorization": f"Bearer {key}"},
                            timeout=TIMEOUT).status_code
        if status == (200 if allowed else 401):
            return
        assert time.monotonic() < until, f"key {key}: still {status} 20 s after SIGUSR2"
        time.sleep(0.05)


def wait_for_log(text):
    """`text` appears in the server's log within 20 s."""
    until = time.monotonic() + 20
    while True:
        with open(os.environ["SERVE_LOG"], encoding="utf-8", errors="replace") as f:
            if text in f.read():
                return
        assert time.monotonic() < until, f"the server's log lacks {text!r} after 20 s"
        time.sleep(0.05)


def test_sigusr2_rereads_the_key_file_and_a_bad_file_keeps_the_old_keys():
    pid = int(os.environ["SERVER_PID"])
    with open(KEY_FILE, "w") as f:
        f.write("# rotated\nrotated-key-1\n")
    os.kill(pid, signal.SIGUSR2)
    wait_for_key("rotated-key-1", True)
    wait_for_key(FILE_KEY, False)
    assert client.models.list().data  # the --api-key / $LLAMA2_API_KEY key stays
    # A file without keys, then no file: each reload is logged (in the access log's format) and
    # the keys stay.
    with open(KEY_FILE, "w") as f:
        f.write("# nothing here\n\n")
    os.kill(pid, signal.SIGUSR2)
    wait_for_log("holds no key (one key per line, # for comments); the old keys stay in use")
    wait_for_key("rotated-key-1", True)
    os.rename(KEY_FILE, KEY_FILE + ".moved")
    os.kill(pid, signal.SIGUSR2)
    wait_for_log(f"SIGUSR2: cannot read {KEY_FILE} (No such file or directory); the old keys stay in use")
    wait_for_key("rotated-key-1", True)
    os.rename(KEY_FILE + ".moved", KEY_FILE)


def test_cors_preflight_is_answered_for_allowed_origins_only_and_responses_carry_the_headers():
    ask = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "authorization,content-type"}
    pre = httpx2.request("OPTIONS", f"{BASE}/v1/chat/completions", headers=ask, timeout=TIMEOUT)
    assert pre.status_code == 204
    assert pre.headers["access-control-allow-origin"] == ORIGIN
    assert "POST" in pre.headers["access-control-allow-methods"]
    assert pre.headers["access-control-allow-headers"] == "authorization,content-type"
    other = httpx2.request("OPTIONS", f"{BASE}/v1/chat/completions",
                           headers={**ask, "Origin": "https://evil.example"}, timeout=TIMEOUT)
    assert other.status_code == 400
    assert other.json()["error"]["param"] == "Origin"
    assert "access-control-allow-origin" not in other.headers
    raw = client.completions.with_raw_response.create(**GREEDY, prompt="Once", extra_headers={"Origin": ORIGIN})
    assert raw.headers["access-control-allow-origin"] == ORIGIN
    assert "X-Request-Id" in raw.headers["access-control-expose-headers"]


def test_metrics_have_vllm_v1_names_and_responses_by_status():
    text = httpx2.get(f"{BASE}/metrics", timeout=TIMEOUT).text
    for name in ["vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total", "vllm:inter_token_latency_seconds_bucket",
                 "vllm:request_prompt_tokens_bucket", "vllm:request_generation_tokens_count"]:
        assert metric(text, name) is not None, f"/metrics lacks {name}"
    assert '# TYPE vllm:inter_token_latency_seconds histogram' in text
    assert metric(text, 'llama2_http_responses_total{status="200"}') >= 5
    assert metric(text, 'llama2_http_responses_total{status="401"}') >= 1
    assert metric(text, 'llama2_http_responses_total{status="204"}') >= 1
    assert metric(text, "vllm:request_generation_tokens_sum") >= 6
