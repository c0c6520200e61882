"""The official OpenAI Python client over https through nginx (launch/nginx/llama2-tls.conf) to
`mpirun -np 2 llama2 serve --http`, verifying nginx's certificate against the test's CA.
tests/http/nginx_tls.sh starts both (the server through launch/llama2-mpirun, with --api-key-file
KEY_FILE) and passes BASE (https://localhost:PORT), CA, API_KEY, MODEL, KEY_FILE, WRAPPER_PID and
SERVE_LOG.
The server's steps take at least 50 ms, so a 20-token stream lasts a second or more; its events
(about 2 KB) fit in one of nginx's buffers, which a buffering proxy would send only at the end.
"""

import os
import signal
import ssl
import time

import httpx2
import openai

BASE = os.environ["BASE"]
TIMEOUT = 30.0
TLS = ssl.create_default_context(cafile=os.environ["CA"])  # this CA only: no system roots
http = httpx2.Client(verify=TLS, trust_env=False, timeout=TIMEOUT)
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key=os.environ["API_KEY"], max_retries=0,
                       http_client=http)
MODEL = os.environ["MODEL"]
LONG = {"model": MODEL, "prompt": "Once", "max_tokens": 200, "extra_body": {"ignore_eos": True}}
SHORT = {**LONG, "max_tokens": 20}
CANCELLED = 'llama2_requests_total{finish_reason="cancelled"}'


def metrics():
    """name{labels} -> value of one scrape of /metrics, through nginx as well."""
    text = http.get(f"{BASE}/metrics").text
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_a_completion_over_tls_keeps_its_request_id():
    raw = client.completions.with_raw_response.create(
        model=MODEL, prompt="Once", max_tokens=4, extra_headers={"X-Request-Id": "tls-request-1"})
    assert raw.headers["x-request-id"] == "tls-request-1"
    r = raw.parse()
    assert r.id == "cmpl-tls-request-1"
    assert r.usage.completion_tokens >= 1


def test_a_stream_arrives_while_it_is_generated_not_at_its_end():
    running_at_first_chunk = None
    usage = None
    with client.completions.create(**SHORT, stream=True, stream_options={"include_usage": True}) as stream:
        for chunk in stream:
            if chunk.choices and chunk.choices[0].text and running_at_first_chunk is None:
                # The first token is here: the generation must still be running (a buffering
                # proxy would hand it over only with the last one).
                m = metrics()
                running_at_first_chunk = m["llama2_requests_running"]
            usage = chunk.usage or usage
    assert running_at_first_chunk == 1
    assert usage.completion_tokens == 20  # and the stream went on to its end


def test_a_client_that_hangs_up_mid_stream_behind_the_proxy_frees_its_kv_blocks():
    before = metrics()[CANCELLED]
    seen = 0
    with client.completions.create(**LONG, stream=True) as stream:
        for chunk in stream:
            seen += len(chunk.choices)
            if seen >= 3:
                break  # leaving `with` closes the TLS connection to nginx mid-generation
    until = time.monotonic() + 20
    while True:
        m = metrics()
        if m[CANCELLED] > before and m["llama2_requests_running"] == 0:
            break
        assert time.monotonic() < until, f"not cancelled within 20 s: {m[CANCELLED]}, {m['llama2_requests_running']}"
        time.sleep(0.05)
    assert m["llama2_kv_cache_usage_ratio"] == 0
    assert m['vllm:kv_cache_usage_perc{model_name="tiny-gqa"}'] == 0


def status_with(key):
    return http.get(f"{BASE}/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code


def test_sigusr2_to_the_wrapper_reloads_the_key_file_on_rank_0():
    """systemctl reload (the unit's ExecReload=): SIGUSR2 to the wrapper, passed on to rank 0."""
    assert status_with("file-key-1") == 200
    with open(os.environ["KEY_FILE"], "w") as f:
        f.write("file-key-2\n")
    os.kill(int(os.environ["WRAPPER_PID"]), signal.SIGUSR2)
    until = time.monotonic() + 20
    while status_with("file-key-2") != 200:
        assert time.monotonic() < until, "the new key was not taken within 20 s"
        time.sleep(0.05)
    assert status_with("file-key-1") == 401
    assert status_with(os.environ["API_KEY"]) == 200  # $LLAMA2_API_KEY stays
    with open(os.environ["SERVE_LOG"]) as f:
        log = f.read()
    assert "SIGUSR2: to rank 0 (serve re-reads --api-key-file)" in log
    assert "SIGUSR2: 1 key(s) loaded from" in log
