package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Logprobs through the JNA client against a real server (tiny model): present only when asked,
 * sane (each alternative list sorted, its probabilities summing to at most 1, a greedy token its
 * own first alternative), and the same for a blocking and a streamed generation. The values are
 * checked against Hugging Face by llama2_reference_test.
 */
@Timeout(60)
class LogprobsTest {
  static TestServer server;
  static Llama2Client client;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.tiny();
    client = Llama2Client.connect(server.socket);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) client.close();
  }

  static GenerationParams.Builder greedy() {
    return GenerationParams.builder().temperature(0).maxNewTokens(8).ignoreEos(true);
  }

  @Test
  void absentUnlessAsked() {
    Completion c = client.generate("The cache", greedy().build());
    assertEquals(8, c.tokenIds().size());
    assertTrue(c.logprobs().isEmpty(), c.logprobs().toString());
  }

  @Test
  void blockingAndStreamedGenerationsCarrySaneLogprobs() throws Exception {
    GenerationParams p = greedy().logprobs(true).topLogprobs(5).build();
    Completion c = client.generate("The cache", p);
    assertEquals(8, c.logprobs().size());
    for (int i = 0; i < 8; i++) {
      TokenLogprob t = c.logprobs().get(i);
      assertEquals(c.tokenIds().get(i), t.tokenId());
      assertTrue(t.logprob() <= 0 && Double.isFinite(t.logprob()), t.toString());
      List<TokenLogprob.Alternative> top = t.top();
      assertEquals(5, top.size());
      double mass = 0;
      for (int j = 0; j < top.size(); j++) {
        mass += Math.exp(top.get(j).logprob());
        if (j > 0) assertTrue(top.get(j).logprob() <= top.get(j - 1).logprob(), t.toString());
      }
      assertTrue(mass <= 1 + 1e-5, "sum of exp(top_logprobs) " + mass);
      // Greedy: the chosen token is the most probable one.
      assertEquals(t.tokenId(), top.get(0).tokenId());
      assertEquals(t.logprob(), top.get(0).logprob());
    }
    Completion s = client.stream("The cache", p, (text, index, id) -> { })
        .completion().get(30, TimeUnit.SECONDS);
    assertEquals(c.tokenIds(), s.tokenIds());
    assertEquals(c.logprobs(), s.logprobs());
  }

  @Test
  void sampledTokensReportTheirOwnLogprob() {
    Completion c = client.generate("The cache",
        GenerationParams.builder().temperature(1.0).topP(0.9).seed(7).maxNewTokens(8).ignoreEos(true)
            .logprobs(true).build());
    assertEquals(8, c.logprobs().size());
    for (TokenLogprob t : c.logprobs()) {
      assertTrue(t.logprob() <= 0, t.toString());
      assertTrue(t.top().isEmpty(), t.toString());
    }
  }

  @Test
  void builderRefusesBadValuesNamingTheRange() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> GenerationParams.builder().topLogprobs(21));
    assertTrue(e.getMessage().contains("top_logprobs must be in [0, 20] (got 21)"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class,
        () -> GenerationParams.builder().topLogprobs(3).build());
    assertTrue(e.getMessage().contains("top_logprobs needs logprobs(true)"), e.getMessage());
  }
}
