package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Logprobs through the JNA client against a real server (tiny model): present only when asked,
 * sane (each alternative list sorted, its probabilities summing to at most 1, a greedy token its
 * own first alternative), the same for a blocking and a streamed generation, and handed to the
 * token listener as each token arrives. The values are checked against Hugging Face by
 * llama2_reference_test.
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

  static void assertSameLogprobs(List<TokenLogprob> expected, List<TokenLogprob> actual) {
    assertEquals(expected.size(), actual.size());
    for (int i = 0; i < expected.size(); i++) {
      TokenLogprob e = expected.get(i);
      TokenLogprob a = actual.get(i);
      assertNotNull(a, "token " + i + " without its logprob");
      assertEquals(e.tokenId(), a.tokenId(), "token " + i);
      assertEquals(e.logprob(), a.logprob(), 1e-6, "logprob of token " + i);
      assertEquals(e.top().size(), a.top().size(), "alternatives of token " + i);
      for (int j = 0; j < e.top().size(); j++) {
        assertEquals(e.top().get(j).tokenId(), a.top().get(j).tokenId(), "alternative " + j + " of " + i);
        assertEquals(e.top().get(j).logprob(), a.top().get(j).logprob(), 1e-6, "alternative " + j + " of " + i);
      }
    }
  }

  /**
   * The listener receives each token's logprob as it arrives, equal to the blocking completion's
   * (greedy, so the same tokens), for a prompt and a chat dialog; null when not asked, and an old
   * three-argument lambda still gets every token.
   */
  @Test
  void listenerReceivesEachTokensLogprob() throws Exception {
    GenerationParams p = greedy().logprobs(true).topLogprobs(3).build();
    Completion c = client.generate("The cache", p);
    // Listener calls come on the reader thread, one at a time; completion() happens after them.
    List<TokenLogprob> seen = new ArrayList<>();
    List<Integer> ids = new ArrayList<>();
    Completion s = client.stream("The cache", p, TokenListener.withLogprobs((text, index, id, lp) -> {
      seen.add(lp);
      ids.add(id);
    })).completion().get(30, TimeUnit.SECONDS);
    assertEquals(c.tokenIds(), ids);
    assertSameLogprobs(c.logprobs(), seen);
    assertEquals(s.logprobs(), seen);

    List<ChatMessage> dialog = List.of(ChatMessage.user("What is a cache?"));
    Completion chat = client.chat(dialog, p);
    List<TokenLogprob> chatSeen = new ArrayList<>();
    client.chatStream(dialog, p, TokenListener.withLogprobs((text, index, id, lp) -> chatSeen.add(lp)))
        .completion().get(30, TimeUnit.SECONDS);
    assertSameLogprobs(chat.logprobs(), chatSeen);

    List<TokenLogprob> unasked = new ArrayList<>();
    client.stream("The cache", greedy().build(),
        TokenListener.withLogprobs((text, index, id, lp) -> unasked.add(lp)))
        .completion().get(30, TimeUnit.SECONDS);
    assertEquals(8, unasked.size());
    for (TokenLogprob lp : unasked) assertNull(lp);
    int[] plain = {0};
    client.stream("The cache", p, (text, index, id) -> plain[0]++).completion().get(30, TimeUnit.SECONDS);
    assertEquals(8, plain[0]);
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
