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
}
