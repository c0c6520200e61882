"""Tool calling through the official OpenAI Python client and langchain-openai, against a real
`mpirun -np 2 llama2 serve --http` (docs/tool-calling.md).

tests/http/tools_client.sh starts the server on the CPU backend (a random model with
models/docs-8m's tokenizer) and runs this file with pytest from the repository's .venv, passing
BASE (http://127.0.0.1:PORT), MODEL and TOKENIZER (its tokenizer.model). The model is random, so
what it calls is arbitrary; what is checked is what the server guarantees: the answer's shape,
the names among the tools, and every call's arguments valid against its tool's schema (Python's
jsonschema, not the server's engine).
"""

import json
import os

import jsonschema
import openai
import pydantic
import pytest
import sentencepiece
from langchain_openai import ChatOpenAI
from typing import Literal

BASE = os.environ["BASE"]
MODEL = os.environ["MODEL"]
TOKENIZER = os.environ["TOKENIZER"]  # the model's tokenizer.model
client = openai.OpenAI(base_url=f"{BASE}/v1", api_key="unused", max_retries=0, timeout=120.0)

# Bounded schemas (enums, bounded numbers and lengths): a random model's call ends by itself.
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather of a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 12},
                "unit": {"enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "unit", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "parameters": {
            "type": "object",
            "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
            "required": ["zone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
BASIC = {"model": MODEL, "max_tokens": 160, "tools": TOOLS}


def check_calls(message, names=SCHEMAS):
    """Every call: an id call_..., type function, a tool's name, arguments valid for its schema."""
    assert message.content is None
    assert message.tool_calls
    for call in message.tool_calls:
        assert call.id.startswith("call_") and len(call.id) == 29
        assert call.type == "function"
        assert call.function.name in names
        jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
    assert len({c.id for c in message.tool_calls}) == len(message.tool_calls)


def test_required_round_trip():
    first = client.chat.completions.create(messages=ASK, tool_choice="required", seed=1, **BASIC)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    check_calls(choice.message)
    # The calls and their results go back as history; the next answer is text (tool_choice none)
    # or more calls (auto): both valid.
    history = ASK + [choice.message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": c.id, "content": "sunny, 18 degrees"}
                for c in choice.message.tool_calls]
    after = client.chat.completions.create(messages=history, tool_choice="none", seed=2,
                                           model=MODEL, max_tokens=20, tools=TOOLS)
    assert after.choices[0].finish_reason in ("stop", "length")
    assert isinstance(after.choices[0].message.content, str)
    assert not after.choices[0].message.tool_calls
    # "none" renders no tools: the same history costs fewer prompt tokens than under "auto".
    auto = client.chat.completions.create(messages=history, tool_choice="auto", seed=2,
                                          model=MODEL, max_tokens=1, tools=TOOLS)
    assert after.usage.prompt_tokens < auto.usage.prompt_tokens
    again = client.chat.completions.create(messages=history, tool_choice="required", seed=3, **BASIC)
    check_calls(again.choices[0].message)
    # The history costs prompt tokens: the calls and results were rendered into the dialog.
    assert again.usage.prompt_tokens > first.usage.prompt_tokens + 20


def test_named_choice_calls_that_tool_once():
    for seed in range(3):
        r = client.chat.completions.create(
            messages=ASK, seed=seed, tool_choice={"type": "function", "function": {"name": "get_time"}},
            **BASIC)
        assert r.choices[0].finish_reason == "tool_calls"
        check_calls(r.choices[0].message, names={"get_time"})
        assert len(r.choices[0].message.tool_calls) == 1


def test_parallel_calls_and_their_bound():
    # The random model closes the array after one call; a bias on the piece "," (which only the
    # grammar's places allow: between calls, members, or inside a string) makes it go on.
    comma = sentencepiece.SentencePieceProcessor(model_file=TOKENIZER).piece_to_id(",")
    bias = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required",
            "max_tokens": 300, "logit_bias": {str(comma): 10}}
    counts = []
    for seed in range(4):
        r = client.chat.completions.create(seed=seed, **bias)
        assert r.choices[0].finish_reason == "tool_calls"
        check_calls(r.choices[0].message)
        counts.append(len(r.choices[0].message.tool_calls))
    assert max(counts) >= 2, counts  # several calls in one answer
    for seed in range(4):
        r = client.chat.completions.create(seed=seed, parallel_tool_calls=False, **bias)
        assert r.choices[0].finish_reason == "tool_calls"
        check_calls(r.choices[0].message)
        assert len(r.choices[0].message.tool_calls) == 1


def test_auto_is_text_or_calls():
    for seed in range(3):
        r = client.chat.completions.create(messages=ASK, seed=seed, max_tokens=30, model=MODEL,
                                           tools=TOOLS, tool_choice="auto")
        choice = r.choices[0]
        if choice.message.tool_calls:
            assert choice.finish_reason == "tool_calls"
            check_calls(choice.message)
        else:
            assert choice.finish_reason in ("stop", "length")
            assert not choice.message.content.startswith("[TOOL_CALLS]")


def reassemble(stream):
    """The calls of a streamed answer from OpenAI's deltas, its content and its finish reason."""
    calls, content, finish = {}, "", None
    for chunk in stream:
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        content += delta.content or ""
        for d in delta.tool_calls or []:
            if d.index not in calls:  # the first delta of a call: id, type and name
                assert d.id.startswith("call_") and d.type == "function" and d.function.name
                calls[d.index] = {"name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and not d.function.name
            calls[d.index]["arguments"] += d.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


@pytest.mark.parametrize("choice", ["required", "auto"])
def test_streamed_deltas_equal_the_whole_answer(choice):
    for seed in range(3):
        args = dict(messages=ASK, tool_choice=choice, seed=seed, temperature=0.8, **BASIC)
        whole = client.chat.completions.create(**args).choices[0]
        calls, content, finish = reassemble(client.chat.completions.create(stream=True, **args))
        assert finish == whole.finish_reason
        if whole.message.tool_calls:
            assert content == ""
            assert calls == [{"name": c.function.name, "arguments": c.function.arguments}
                             for c in whole.message.tool_calls]
            assert len(calls) > 0
        else:
            assert calls == [] and content == whole.message.content


def test_streamed_logprobs_cover_every_token_of_a_call():
    args = dict(messages=ASK, tool_choice="required", seed=7, logprobs=True, top_logprobs=2, **BASIC)
    whole = client.chat.completions.create(**args)
    tokens, calls = [], 0
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                **args):
        if chunk.choices and chunk.choices[0].logprobs:
            tokens += chunk.choices[0].logprobs.content
        if chunk.choices and chunk.choices[0].delta.tool_calls:
            calls += sum(1 for d in chunk.choices[0].delta.tool_calls if d.id)
    assert [t.token for t in tokens] == [t.token for t in whole.choices[0].logprobs.content]
    assert len(tokens) == whole.usage.completion_tokens
    assert calls == len(whole.choices[0].message.tool_calls)


def refusal(**kwargs):
    body = {"model": MODEL, "messages": ASK, "max_tokens": 4, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**body)
    error = info.value.body
    assert info.value.status_code == 400 and error["type"] == "invalid_request_error"
    return error["param"], error["message"]


def test_refusals_name_the_parameter():
    bad_name = {"type": "function", "function": {"name": "get weather"}}
    no_name = {"type": "function", "function": {"parameters": {"type": "object"}}}
    refused_schema = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "not": {"required": ["a"]}}}}
    assert refusal(tools=[no_name])[0] == "tools"
    assert refusal(tools=[bad_name]) == (
        "tools", 'tools[0].function.name: "get weather" must match ^[a-zA-Z0-9_-]{1,64}$ '
        "(letters, digits, '_' and '-', 1 to 64)")
    assert "given twice" in refusal(tools=[TIME, TIME])[1]
    param, message = refusal(tools=[refused_schema])
    assert param == "tools" and "tools[0] (f) parameters" in message and "'not'" in message
    param, message = refusal(tools=[TIME], tool_choice={"type": "function",
                                                         "function": {"name": "get_weather"}})
    assert param == "tool_choice" and "not among" in message
    assert refusal(tool_choice="required")[0] == "tool_choice"
    param, message = refusal(messages=ASK + [{"role": "tool", "content": "18"}], tools=[TIME])
    assert param == "messages" and "tool_call_id" in message


class Forecast(pydantic.BaseModel):
    """A forecast for one city."""

    city: str = pydantic.Field(max_length=10)
    unit: Literal["celsius", "fahrenheit"]
    days: int = pydantic.Field(ge=1, le=5)


def get_time(zone: int) -> str:
    """The time in a zone."""
    return "noon"


def langchain_model(**kwargs):
    return ChatOpenAI(base_url=f"{BASE}/v1", api_key="unused", model=MODEL, max_tokens=160,
                      max_retries=0, timeout=120, **kwargs)


def test_langchain_bind_tools():
    bound = langchain_model(seed=4).bind_tools([Forecast, get_time], tool_choice="required")
    reply = bound.invoke("Forecast for Oslo?")
    assert reply.tool_calls and reply.response_metadata["finish_reason"] == "tool_calls"
    schemas = {"Forecast": Forecast.model_json_schema(),
               "get_time": {"type": "object", "properties": {"zone": {"type": "integer"}},
                            "required": ["zone"]}}
    for call in reply.tool_calls:
        assert call["name"] in schemas and call["id"].startswith("call_")
        jsonschema.validate(call["args"], schemas[call["name"]])


def test_langchain_with_structured_output_function_calling():
    structured = langchain_model(seed=5).with_structured_output(Forecast, method="function_calling")
    for question in ("Forecast for Oslo?", "And for Rome?"):
        forecast = structured.invoke(question)
        assert isinstance(forecast, Forecast)
        jsonschema.validate(forecast.model_dump(), Forecast.model_json_schema())
