// The official OpenAI Node client (`openai` from npm, tests/http/package.json) against a real
// `mpirun -np 2 llama2 serve --http` on the CPU backend, started by tests/http/openai_client.sh,
// which passes BASE (http://127.0.0.1:PORT), API_KEY, MODEL and SERVER_PID. Tests run in order;
// the last one drains the server (SIGTERM) and checks 503.
import { test } from 'node:test';
import assert from 'node:assert/strict';
// The client on Node's own fetch: its default transport on Node 18 (node-fetch 2.7) fails streams
// with "Premature close" after their last event against any keep-alive server, a plain Node
// http.createServer SSE endpoint included (checked while writing this test), so it is left out.
import 'openai/shims/web';
import OpenAI from 'openai';

const BASE = process.env.BASE;
const MODEL = process.env.MODEL;
const client = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: process.env.API_KEY, maxRetries: 0, timeout: 60000 });
const greedy = { model: MODEL, temperature: 0, max_tokens: 24, ignore_eos: true };
const chat = [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Tell me about the cache.' }];

// The status and error body of a refused call (the client throws APIError).
async function refusal(call) {
  try {
    await call();
  } catch (e) {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${e}`);
    return e;
  }
  assert.fail('the call was not refused');
}

async function metrics() {
  const text = await (await fetch(`${BASE}/metrics`)).text();
  const value = (name) => {
    const line = text.split('\n').find((l) => l.startsWith(name + ' ') || l.startsWith(name + '{'));
    return line === undefined ? undefined : Number(line.split(' ').pop());
  };
  return { text, value };
}

test('completions: non-streamed, greedy, usage', async () => {
  const r = await client.completions.create({ ...greedy, prompt: 'Once upon a time' });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 24);
  assert.ok(r.usage.prompt_tokens >= 5);
  assert.ok(r.choices[0].text.length > 0);
});

test('completions: token-id prompt, streamed text equals the non-streamed text', async () => {
  const whole = await client.completions.create({ ...greedy, prompt: [1, 15, 27, 300] });
  assert.equal(whole.usage.prompt_tokens, 4);
  let text = '';
  let finish = null;
  for await (const chunk of await client.completions.create({ ...greedy, prompt: [1, 15, 27, 300], stream: true })) {
    text += chunk.choices[0]?.text ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, 'length');
});

test('chat: non-streamed and streamed agree; include_usage adds the usage chunk', async () => {
  const whole = await client.chat.completions.create({ ...greedy, messages: chat });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.usage.completion_tokens, 24);
  const stream = await client.chat.completions.create({
    ...greedy, messages: chat, stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let role = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.choices.length) {
      role = chunk.choices[0].delta.role ?? role;
      text += chunk.choices[0].delta.content ?? '';
    }
    if (chunk.usage) usage = chunk.usage;
  }
  assert.equal(role, 'assistant');
  assert.equal(text, whole.choices[0].message.content);
  assert.deepEqual(usage, whole.usage);
  assert.ok(chunks > 3, `a stream of ${chunks} chunks`);
});

test('stop strings end the text before the stop string with finish_reason stop', async () => {
  const whole = await client.completions.create({ ...greedy, prompt: 'The cache', max_tokens: 40 });
  const text = whole.choices[0].text;
  // A 3-character window from the middle on, with no whitespace (the model is random).
  let at = Math.floor(text.length / 2);
  while (at + 3 <= text.length && /\s/.test(text.slice(at, at + 3))) at++;
  const stop = text.slice(at, at + 3);
  assert.ok(stop.length === 3, `a stop string from ${JSON.stringify(text)}`);
  const cut = await client.completions.create({ ...greedy, prompt: 'The cache', max_tokens: 40, stop: [stop, 'zzzz'] });
  assert.equal(cut.choices[0].finish_reason, 'stop');
  assert.equal(cut.choices[0].text, text.slice(0, text.indexOf(stop)));
});

test('seed reproducibility: the same seed samples the same text, another seed another', async () => {
  const req = { model: MODEL, messages: chat, temperature: 1.0, top_p: 0.95, max_tokens: 32, ignore_eos: true };
  const a = await client.chat.completions.create({ ...req, seed: 1234 });
  const b = await client.chat.completions.create({ ...req, seed: 1234 });
  const c = await client.chat.completions.create({ ...req, seed: 99 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

test('penalties and extensions are accepted; GET /v1/models lists the served name', async () => {
  const r = await client.chat.completions.create({
    ...greedy, messages: chat, presence_penalty: 0.5, frequency_penalty: 0.5, top_k: 5,
    repetition_penalty: 1.1, user: 'someone', n: 1,
  });
  assert.equal(r.usage.completion_tokens, 24);
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), [MODEL]);
});

test('logprobs: chat and completions, streamed and not; log-probabilities of the model (<= 0, top sorted, chosen first when greedy)', async () => {
  const r = await client.chat.completions.create({ ...greedy, messages: chat, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs.content;
  assert.equal(content.length, r.usage.completion_tokens);
  for (const t of content) {
    assert.ok(t.logprob <= 1e-6, JSON.stringify(t));
    assert.equal(t.top_logprobs.length, 3);
    const p = t.top_logprobs.map((a) => a.logprob);
    assert.ok(p[0] >= p[1] && p[1] >= p[2], JSON.stringify(p));
    assert.ok(p.reduce((s, x) => s + Math.exp(x), 0) <= 1 + 1e-4);
    assert.equal(t.top_logprobs[0].token, t.token);  // greedy: the chosen token is the most probable
    assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-6);
  }
  const stream = await client.chat.completions.create({ ...greedy, messages: chat, logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  for await (const chunk of stream) {
    const lp = chunk.choices[0]?.logprobs;
    if (lp) streamed.push(...lp.content);
  }
  assert.deepEqual(streamed.map((t) => t.logprob), content.map((t) => t.logprob));
  const c = await client.completions.create({ ...greedy, prompt: 'Once upon a time', logprobs: 2 });
  const lp = c.choices[0].logprobs;
  assert.equal(lp.tokens.length, c.usage.completion_tokens);
  assert.equal(lp.token_logprobs.length, lp.tokens.length);
  assert.ok(lp.top_logprobs.every((o) => Object.keys(o).length >= 1 && Object.keys(o).length <= 2));
  const plain = await client.chat.completions.create({ ...greedy, messages: chat });
  assert.equal(plain.choices[0].logprobs, null);
});

test('400: unsupported and invalid parameters, in OpenAI error shape naming the parameter', async () => {
  const cases = [
    [{ tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }, 'tools'],
    [{ response_format: { type: 'json_object' } }, 'response_format'],
    [{ n: 2 }, 'n'],
    [{ logprobs: false, top_logprobs: 3 }, null],
    [{ logprobs: true, top_logprobs: 21 }, null],
    [{ temperature: -1 }, null],
    [{ max_tokens: 0 }, null],
  ];
  for (const [extra, param] of cases) {
    const e = await refusal(() => client.chat.completions.create({ ...greedy, messages: chat, ...extra }));
    assert.equal(e.status, 400, JSON.stringify(extra));
    assert.equal(e.type, 'invalid_request_error');
    assert.ok(e.error.message.length > 0);
    if (param) assert.equal(e.param, param);
  }
  const m = await refusal(() => client.chat.completions.create({ ...greedy, messages: chat, max_tokens: 0 }));
  assert.match(m.error.message, /max_tokens must be >= 1/);
  const echo = await refusal(() => client.completions.create({ ...greedy, prompt: 'x', echo: true }));
  assert.equal(echo.param, 'echo');
  const bo = await refusal(() => client.completions.create({ ...greedy, prompt: 'x', best_of: 3 }));
  assert.equal(bo.param, 'best_of');
  const order = await refusal(() => client.chat.completions.create({ ...greedy, messages: [{ role: 'assistant', content: 'hi' }] }));
  assert.equal(order.status, 400);
  const long = await refusal(() => client.completions.create({ ...greedy, prompt: 'word '.repeat(600) }));
  assert.equal(long.status, 400);
  assert.equal(long.code, 'prompt_too_long');
});

test('401: a wrong or missing API key', async () => {
  const bad = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: 'wrong-key', maxRetries: 0 });
  const e = await refusal(() => bad.models.list());
  assert.equal(e.status, 401);
  const none = await fetch(`${BASE}/v1/models`);
  assert.equal(none.status, 401);
  assert.equal((await none.json()).error.code, 'invalid_api_key');
});

test('404: an unknown model and an unknown path', async () => {
  const e = await refusal(() => client.chat.completions.create({ ...greedy, model: 'gpt-4', messages: chat }));
  assert.equal(e.status, 404);
  assert.equal(e.code, 'model_not_found');
  const r = await fetch(`${BASE}/v1/embeddings`, { method: 'POST', headers: { Authorization: `Bearer ${process.env.API_KEY}` }, body: '{}' });
  assert.equal(r.status, 404);
  assert.equal((await r.json()).error.code, 'not_found');
});

test('413: a body over --http-max-body-bytes', async () => {
  const e = await refusal(() => client.completions.create({ ...greedy, prompt: 'x'.repeat(70000) }));
  assert.equal(e.status, 413);
  assert.equal(e.code, 'body_too_large');
});

test('429: queue_full with Retry-After when the batch and the queue are full', async () => {
  // --max-batch-size 2 --max-queue 2: of 8 long streams at once, at most 4 are taken.
  const long = { model: MODEL, prompt: 'Once', max_tokens: 400, ignore_eos: true, temperature: 0 };
  const results = await Promise.allSettled(Array.from({ length: 8 }, async () => {
    let n = 0;
    for await (const chunk of await client.completions.create({ ...long, stream: true })) n += chunk.choices.length;
    return n;
  }));
  const refused = results.filter((r) => r.status === 'rejected');
  assert.ok(refused.length >= 4, `${refused.length} of 8 refused`);
  for (const r of refused) {
    assert.equal(r.reason.status, 429);
    assert.equal(r.reason.code, 'queue_full');
    assert.equal(r.reason.headers['retry-after'], '1');
  }
  assert.ok(results.some((r) => r.status === 'fulfilled'));
});

test('a client that disconnects mid-stream cancels its generation and frees its KV blocks', async () => {
  const before = (await metrics()).value('llama2_requests_total{finish_reason="cancelled"}');
  const stream = await client.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 450, ignore_eos: true, stream: true });
  let seen = 0;
  for await (const chunk of stream) {
    seen += chunk.choices.length;
    if (seen >= 3) break;  // leaving the loop aborts the request: the connection closes
  }
  const until = Date.now() + 20000;
  let m;
  for (;;) {
    m = await metrics();
    if (m.value('llama2_requests_total{finish_reason="cancelled"}') > before) break;
    assert.ok(Date.now() < until, 'the generation was not cancelled within 20 s');
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.equal(m.value('llama2_requests_running'), 0);
  assert.equal(m.value('llama2_kv_cache_usage_ratio'), 0);
  assert.equal(m.value('vllm:num_requests_running'), 0);
});

test('a non-streamed request whose client hangs up is cancelled too', async () => {
  const before = (await metrics()).value('llama2_requests_total{finish_reason="cancelled"}');
  const ac = new AbortController();
  const call = client.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 450, ignore_eos: true }, { signal: ac.signal });
  setTimeout(() => ac.abort(), 100);
  await assert.rejects(call);
  const until = Date.now() + 20000;
  while ((await metrics()).value('llama2_requests_total{finish_reason="cancelled"}') <= before) {
    assert.ok(Date.now() < until, 'the generation was not cancelled within 20 s');
    await new Promise((r) => setTimeout(r, 50));
  }
});

test('GET /health is 200 when ready; /metrics has the vLLM names', async () => {
  const h = await fetch(`${BASE}/health`);
  assert.equal(h.status, 200);
  assert.equal((await h.json()).status, 'ready');
  const m = await metrics();
  for (const name of ['vllm:num_requests_waiting', 'vllm:gpu_cache_usage_perc', 'vllm:time_to_first_token_seconds_bucket',
    'vllm:e2e_request_latency_seconds_count', 'vllm:generation_tokens_total', 'llama2_requests_rejected_total']) {
    assert.ok(m.text.includes(name), `/metrics lacks ${name}`);
  }
  assert.ok(m.value('llama2_requests_rejected_total{code="queue_full"}') >= 4);
});

test('503 while draining: in-flight streams finish, new requests are refused', async () => {
  const stream = await client.completions.create({ model: MODEL, prompt: 'Once', max_tokens: 300, ignore_eos: true, stream: true });
  const it = stream[Symbol.asyncIterator]();
  await it.next();
  process.kill(Number(process.env.SERVER_PID), 'SIGTERM');
  const until = Date.now() + 20000;
  let health;
  do {
    health = await fetch(`${BASE}/health`);
    assert.ok(Date.now() < until, 'health never reported draining');
  } while (health.status === 200);
  assert.equal(health.status, 503);
  assert.equal((await health.json()).status, 'draining');
  const e = await refusal(() => client.completions.create({ ...greedy, prompt: 'late' }));
  assert.equal(e.status, 503);
  assert.equal(e.code, 'shutting_down');
  let finish = null;
  for (let r = await it.next(); !r.done; r = await it.next()) finish = r.value.choices[0]?.finish_reason ?? finish;
  assert.equal(finish, 'length');
});
