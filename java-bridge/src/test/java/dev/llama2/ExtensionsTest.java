package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Collections;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Issue 35's token-level parameters and issue 36's response_format through GenerationParams, on the
 * tiny model (512 pieces, EOS = 2): each one's effect is checked against a plain greedy reference
 * of the same prompt, so a parameter the client dropped or misspelt fails here.
 */
@Timeout(60)
class ExtensionsTest {
  static TestServer server;
  static Llama2Client client;
  static final String PROMPT = "The weather in Paris";
  static final GenerationParams GREEDY =
      GenerationParams.builder().temperature(0).maxNewTokens(20).ignoreEos(true).build();
  static Completion reference;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.tiny();
    client = Llama2Client.connect(server.socket);
    reference = client.generate(PROMPT, GREEDY);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) client.close();
  }

  @Test
  void logitBiasForcesAToken() {
    int forced = reference.tokenIds().get(0) == 300 ? 301 : 300;
    Completion c = client.generate(PROMPT, GREEDY.toBuilder().logitBias(forced, 100).build());
    assertEquals(Collections.nCopies(20, forced), c.tokenIds());
    Completion banned = client.generate(PROMPT, GREEDY.toBuilder()
        .logitBias(reference.tokenIds().get(0), -100).build());
    assertNotEquals(reference.tokenIds().get(0), banned.tokenIds().get(0));
    InvalidRequestException e = assertThrows(InvalidRequestException.class,
        () -> client.generate(PROMPT, GREEDY.toBuilder().logitBias(512, 1).build()));
    assertTrue(e.getMessage().contains("logit_bias"), e.getMessage());
  }

  @Test
  void stopTokenIdsEndTheGenerationAndMinTokensHoldsThemBack() {
    int k = 5;
    int stopId = reference.tokenIds().get(k);
    int first = reference.tokenIds().indexOf(stopId);
    Completion c = client.generate(PROMPT, GREEDY.toBuilder().stopTokenIds(List.of(stopId)).build());
    assertEquals(FinishReason.STOP, c.finishReason());
    assertEquals(reference.tokenIds().subList(0, first + 1), c.tokenIds());
    Completion held = client.generate(PROMPT, GREEDY.toBuilder().stopTokenIds(List.of(stopId))
        .minTokens(first + 1).build());
    assertTrue(held.completionTokens() > first + 1, "min_tokens masked the stop id: " + held);
  }

  @Test
  void minPOfOneKeepsOnlyTheMostProbableToken() {
    Completion c = client.generate(PROMPT, GREEDY.toBuilder().temperature(1.0).seed(7).minP(1.0)
        .build());
    assertEquals(reference.tokenIds(), c.tokenIds());
    Completion free = client.generate(PROMPT, GREEDY.toBuilder().temperature(1.0).seed(7).build());
    assertNotEquals(reference.tokenIds(), free.tokenIds(), "without min_p the seed samples");
  }

  @Test
  void includeStopStrInOutputKeepsTheStopString() {
    String text = reference.text();
    String stop = text.substring(text.length() / 2, text.length() / 2 + 3);
    int at = text.indexOf(stop);
    GenerationParams p = GREEDY.toBuilder().stop(stop).build();
    assertEquals(text.substring(0, at), client.generate(PROMPT, p).text());
    assertEquals(text.substring(0, at) + stop,
        client.generate(PROMPT, p.toBuilder().includeStopStrInOutput(true).build()).text());
  }

  @Test
  void skipSpecialTokensFalseShowsEos() {
    GenerationParams eos = GREEDY.toBuilder().logitBias(2, 100).maxNewTokens(3).build();
    Completion hidden = client.generate(PROMPT, eos);
    assertEquals(List.of(2, 2, 2), hidden.tokenIds());
    assertEquals("", hidden.text());
    assertEquals("</s></s></s>",
        client.generate(PROMPT, eos.toBuilder().skipSpecialTokens(false).build()).text());
  }

  enum Mood { HAPPY, SAD }

  record Inner(boolean ok, Mood mood) {}

  record Shape(Mood mood, List<Inner> items, java.util.Optional<Mood> maybe) {}

  @Test
  void responseFormatJsonSchemaFromARecord() {
    GenerationParams p = GenerationParams.builder().temperature(0.8).seed(3).maxNewTokens(200)
        .responseFormat(ResponseFormat.jsonSchema(Shape.class)).build();
    Completion c = client.generate(PROMPT, p);
    assertEquals(FinishReason.STOP, c.finishReason(), c.text());
    Map<String, Object> v = Json.parseObject(c.text());
    assertTrue(List.of("HAPPY", "SAD").contains(v.get("mood")), c.text());
    for (Object item : (List<?>) v.get("items")) {
      Map<?, ?> m = (Map<?, ?>) item;
      assertTrue(m.get("ok") instanceof Boolean, c.text());
      assertTrue(List.of("HAPPY", "SAD").contains(m.get("mood")), c.text());
      assertEquals(2, m.size(), c.text());
    }
    assertTrue(v.keySet().stream().allMatch(k -> List.of("mood", "items", "maybe").contains(k)));
    Completion any = client.generate(PROMPT, GenerationParams.builder().temperature(0)
        .maxNewTokens(200).responseFormat(ResponseFormat.jsonObject()).build());
    if (any.finishReason() == FinishReason.STOP) Json.parseObject(any.text());
    assertTrue(any.text().startsWith("{"), any.text());
  }
}
