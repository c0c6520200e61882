package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** The builder has the CLI's defaults and refuses out-of-range values naming the parameter. */
class GenerationParamsTest {
  @Test
  void defaultsAreTheCliDefaults() {
    GenerationParams p = GenerationParams.defaults();
    assertEquals(1.0, p.temperature());
    assertEquals(1.0, p.topP());
    assertEquals(0, p.topK());
    assertEquals(1.0, p.repetitionPenalty());
    assertEquals(0.0, p.presencePenalty());
    assertEquals(0.0, p.frequencyPenalty());
    assertEquals(128, p.maxNewTokens());
    assertNull(p.seed());
    assertEquals(List.of(), p.stop());
    assertEquals(false, p.ignoreEos());
    assertNull(p.timeout());
  }

  private static void refused(String param, Executable e) {
    IllegalArgumentException ex = assertThrows(IllegalArgumentException.class, e);
    assertTrue(ex.getMessage().startsWith(param), "message names " + param + ": " + ex.getMessage());
  }

  @Test
  void outOfRangeValuesAreRefusedNamingTheParameter() {
    GenerationParams.Builder b = GenerationParams.builder();
    refused("temperature", () -> b.temperature(-0.1));
    refused("temperature", () -> b.temperature(Double.NaN));
    refused("top_p", () -> b.topP(0));
    refused("top_p", () -> b.topP(1.01));
    refused("top_p", () -> b.topP(Double.NaN));
    refused("top_k", () -> b.topK(-1));
    refused("repetition_penalty", () -> b.repetitionPenalty(0));
    refused("repetition_penalty", () -> b.repetitionPenalty(Double.POSITIVE_INFINITY));
    refused("presence_penalty", () -> b.presencePenalty(2.01));
    refused("presence_penalty", () -> b.presencePenalty(Double.NaN));
    refused("frequency_penalty", () -> b.frequencyPenalty(-2.5));
    refused("frequency_penalty", () -> b.frequencyPenalty(Double.NEGATIVE_INFINITY));
    refused("max_new_tokens", () -> b.maxNewTokens(0));
    refused("stop", () -> b.stop(""));
    refused("stop", () -> b.stop("\uD800x"));
    refused("timeout", () -> b.timeout(Duration.ZERO));
  }

  @Test
  void boundaryValuesAreAccepted() {
    GenerationParams p = GenerationParams.builder().temperature(0).topP(1).topK(0)
        .repetitionPenalty(1e-6).presencePenalty(-2).frequencyPenalty(2).maxNewTokens(1).seed(-1L)
        .stop("\n\n").ignoreEos(true)
        .timeout(Duration.ofMillis(1)).build();
    assertEquals(0.0, p.temperature());
    assertEquals(-1L, p.seed());
    String json = p.toString();
    assertTrue(json.contains("\"seed\":18446744073709551615"), "seed is unsigned: " + json);
    assertTrue(json.contains("\"stop\":[\"\\n\\n\"]"), json);
    assertTrue(json.contains("\"timeout_ms\":1"), json);
    assertTrue(json.contains("\"presence_penalty\":-2.0,\"frequency_penalty\":2.0"), json);
    assertEquals(p.toString(), p.toBuilder().build().toString());
  }

  @Test
  void vllmParametersAreCheckedAndWritten() {
    GenerationParams.Builder b = GenerationParams.builder();
    refused("logit_bias values", () -> b.logitBias(5, 150));
    refused("logit_bias values", () -> b.logitBias(5, Double.NaN));
    refused("logit_bias keys", () -> b.logitBias(-1, 1));
    refused("stop_token_ids", () -> b.stopTokenIds(List.of(3, -2)));
    refused("min_tokens", () -> b.minTokens(-1));
    refused("min_p", () -> b.minP(1.5));
    refused("min_p", () -> b.minP(Double.NaN));
    GenerationParams p = GenerationParams.builder().logitBias(java.util.Map.of(7, -100.0, 3, 2.5))
        .stopTokenIds(List.of(13, 2)).minTokens(4).minP(0.05).includeStopStrInOutput(true)
        .skipSpecialTokens(false).build();
    String json = p.toString();
    assertTrue(json.contains("\"logit_bias\":{\"3\":2.5,\"7\":-100.0}"), json);
    assertTrue(json.contains("\"stop_token_ids\":[13,2],\"min_tokens\":4,\"min_p\":0.05,"
        + "\"include_stop_str_in_output\":true,\"skip_special_tokens\":false"), json);
    assertEquals(json, p.toBuilder().build().toString());
    String plain = GenerationParams.defaults().toString();
    for (String key : List.of("logit_bias", "stop_token_ids", "min_tokens", "min_p",
        "include_stop_str", "skip_special", "response_format", "tools", "tool_choice")) {
      assertTrue(!plain.contains(key), "defaults do not write " + key + ": " + plain);
    }
  }

  record Answer(String city, int days) {}

  @Test
  void responseFormatAndToolsAreCheckedAndWritten() {
    refused("response_format", () -> ResponseFormat.jsonSchema("x", "[1]"));
    refused("response_format", () -> ResponseFormat.jsonSchema("x", "{\"type\":"));
    refused("response_format", () -> GenerationParams.builder().ignoreEos(true)
        .responseFormat(ResponseFormat.jsonObject()).build());
    refused("tools", () -> Tool.function("bad name", null, "{}"));
    refused("tools", () -> Tool.function("f", null, "1"));
    Tool f = Tool.function("get_weather", "The weather", Answer.class);
    refused("tools", () -> GenerationParams.builder().tools(List.of(f, f)));
    refused("tool_choice", () -> GenerationParams.builder().toolChoice(ToolChoice.REQUIRED).build());
    refused("tool_choice", () -> GenerationParams.builder().tools(List.of(f))
        .toolChoice(ToolChoice.function("other")).build());
    refused("tools", () -> GenerationParams.builder().tools(List.of(f))
        .responseFormat(ResponseFormat.jsonObject()).build());
    GenerationParams.builder().tools(List.of(f)).toolChoice(ToolChoice.NONE)
        .responseFormat(ResponseFormat.jsonObject()).build();  // none: the format alone constrains

    String schema = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"},"
        + "\"days\":{\"type\":\"integer\"}},\"required\":[\"city\",\"days\"],"
        + "\"additionalProperties\":false}";
    String json = GenerationParams.builder().responseFormat(ResponseFormat.jsonSchema(Answer.class))
        .build().toString();
    assertTrue(json.contains("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":"
        + "{\"name\":\"Answer\",\"schema\":" + schema + ",\"strict\":true}}"), json);
    json = GenerationParams.builder().tools(List.of(f)).toolChoice(ToolChoice.function("get_weather"))
        .parallelToolCalls(false).build().toString();
    assertTrue(json.contains("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":"
        + "\"get_weather\",\"description\":\"The weather\",\"parameters\":" + schema + "}}],"
        + "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}},"
        + "\"parallel_tool_calls\":false"), json);
    assertEquals(json, GenerationParams.builder().tools(List.of(f))
        .toolChoice(ToolChoice.function("get_weather")).parallelToolCalls(false).build()
        .toBuilder().build().toString());
  }
}
