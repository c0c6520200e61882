package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.IntByReference;
import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Blocking and streamed generation on the tiny model against the CLI and each other. */
@Timeout(60)
class BlockingTest {
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

  @SuppressWarnings("unchecked")
  private static List<Integer> ids(Map<String, Object> cli) {
    List<Integer> out = new ArrayList<>();
    for (Object o : (List<Object>) cli.get("token_ids")) out.add(((Number) o).intValue());
    return out;
  }

  @Test
  void blockingGenerateEqualsTheCli() throws Exception {
    GenerationParams p = GenerationParams.builder().temperature(0.8).topP(0.9).topK(40)
        .repetitionPenalty(1.1).maxNewTokens(24).seed(42).build();
    String prompt = "The weather in Paris";
    Completion c = client.generate(prompt, p);
    Map<String, Object> cli = TestServer.cliGenerate(TestServer.MODEL, prompt, p);
    assertEquals(cli.get("text"), c.text());
    assertEquals(ids(cli), c.tokenIds());
    assertEquals(cli.get("finish_reason"), c.finishReason().name().toLowerCase());
    assertEquals("42", c.seedString());
    assertEquals(c.tokenIds().size(), c.completionTokens());
    assertTrue(c.promptTokens() > 1, "prompt tokens counted (BOS + text)");
    assertTrue(c.timings().totalSeconds() >= c.timings().timeToFirstTokenSeconds()
        && c.timings().timeToFirstTokenSeconds() > 0, c.timings().toString());
  }

  /** The OpenAI penalties reach the server: greedy output changes with them, as the CLI's does. */
  @Test
  void presenceAndFrequencyPenaltiesEqualTheCli() throws Exception {
    GenerationParams plain = GenerationParams.builder().temperature(0).maxNewTokens(32)
        .ignoreEos(true).build();
    GenerationParams penalized = plain.toBuilder().presencePenalty(1.5).frequencyPenalty(1.0)
        .build();
    String prompt = "The weather in Paris";
    Completion c = client.generate(prompt, penalized);
    Map<String, Object> cli = TestServer.cliGenerate(TestServer.MODEL, prompt, penalized);
    assertEquals(ids(cli), c.tokenIds());
    assertEquals(cli.get("text"), c.text());
    // Not vacuous: without the penalties this prompt's greedy tokens differ.
    assertTrue(!client.generate(prompt, plain).tokenIds().equals(c.tokenIds()),
        "the penalties changed nothing on this prompt: " + c.tokenIds());
  }

  /** Without a seed the server picks one and reports it; the CLI with that seed reproduces it. */
  @Test
  void reportedSeedReproducesTheOutput() throws Exception {
    GenerationParams p = GenerationParams.builder().temperature(1.0).maxNewTokens(16)
        .ignoreEos(true).build();
    Completion c = client.generate("Once upon a time", p);
    assertEquals(FinishReason.LENGTH, c.finishReason());
    assertEquals(16, c.completionTokens());
    Map<String, Object> cli = TestServer.cliGenerate(TestServer.MODEL, "Once upon a time",
        p.toBuilder().seed(c.seed()).build());
    assertEquals(Long.toUnsignedString(c.seed()), String.valueOf(cli.get("seed")));
    assertEquals(cli.get("text"), c.text());
    assertEquals(ids(cli), c.tokenIds());
  }

  /** Callback and iterator pieces, concatenated as UTF-8 bytes, equal the blocking text's bytes. */
  @Test
  void streamedPiecesConcatenateToTheBlockingText() throws Exception {
    String[] prompts = {"北京的秋天很美，我们去爬山吧", "emoji 🍂🐈🚀 and more 🎉", "Café crème brûlée, naïve façade",
        "Ünïcödé ✓ Ελληνικά кириллица 日本語"};
    boolean sawMultibyte = false;
    for (int i = 0; i < prompts.length; i++) {
      GenerationParams p = GenerationParams.builder().temperature(0.9).seed(100 + i)
          .maxNewTokens(48).ignoreEos(true).build();
      byte[] blocking = client.generate(prompts[i], p).text().getBytes(StandardCharsets.UTF_8);

      ByteArrayOutputStream viaCallback = new ByteArrayOutputStream();
      AtomicInteger expectIndex = new AtomicInteger();
      AtomicInteger badIndex = new AtomicInteger();
      Generation g = client.stream(prompts[i], p, (text, index, tokenId) -> {
        if (index != expectIndex.getAndIncrement()) badIndex.incrementAndGet();
        viaCallback.writeBytes(text.getBytes(StandardCharsets.UTF_8));
      });
      Completion streamed = g.await();
      assertEquals(0, badIndex.get(), "token indices contiguous from 0");
      assertEquals(48, expectIndex.get());
      assertArrayEquals(blocking, viaCallback.toByteArray(), "callback pieces of prompt " + i);
      assertArrayEquals(blocking, streamed.text().getBytes(StandardCharsets.UTF_8));

      ByteArrayOutputStream viaIterator = new ByteArrayOutputStream();
      int pieces = 0;
      try (TokenStream ts = client.tokens(prompts[i], p)) {
        for (String piece : ts) {
          viaIterator.writeBytes(piece.getBytes(StandardCharsets.UTF_8));
          pieces++;
        }
        assertEquals(48, ts.completion().completionTokens());
      }
      assertEquals(48, pieces, "one element per token");
      assertArrayEquals(blocking, viaIterator.toByteArray(), "iterator pieces of prompt " + i);
      sawMultibyte |= blocking.length != new String(blocking, StandardCharsets.UTF_8).length();
    }
    assertTrue(sawMultibyte, "the outputs contain multi-byte UTF-8 (so the test means something)");
  }

  /** The shim's own blocking generate: its on_token pieces (bytes) add up to the text it returns. */
  @Test
  void shimBlockingGenerateCallbackBytesEqualItsText() {
    NativeShim.Lib lib = NativeShim.lib();
    Pointer h = lib.llama2_shim_connect(Utf8.cString(server.socket), 2000);
    assertNotNull(h, NativeShim.lastError());
    try {
      ByteArrayOutputStream pieces = new ByteArrayOutputStream();
      List<Integer> tokenIds = new ArrayList<>();
      int[] withLogprob = {0};
      NativeShim.TokenFn onToken = new NativeShim.TokenFn() {
        @Override
        public void invoke(Pointer user, Pointer text, int len, int index, int tokenId,
                           Pointer logprobJson, int logprobLen) {
          pieces.writeBytes(len > 0 ? text.getByteArray(0, len) : new byte[0]);
          tokenIds.add(tokenId);
          if (logprobJson != null || logprobLen != 0) withLogprob[0]++;  // not asked for
        }
      };
      IntByReference len = new IntByReference();
      Pointer r = lib.llama2_shim_generate(h, Utf8.cString("{\"prompt\":\"北京 café 🍂\","
          + "\"max_new_tokens\":40,\"seed\":9,\"ignore_eos\":true}"), 20000, onToken, null, len);
      assertNotNull(r, NativeShim.lastError());
      Map<String, Object> done = Json.parseObject(NativeShim.take(r, len.getValue()));
      assertEquals("done", done.get("event"));
      assertArrayEquals(((String) done.get("text")).getBytes(StandardCharsets.UTF_8), pieces.toByteArray());
      assertEquals(40, tokenIds.size());
      assertEquals(0, withLogprob[0], "tokens with logprob fields although none were asked for");
      assertEquals(40, ((List<?>) done.get("token_ids")).size());
      java.lang.ref.Reference.reachabilityFence(onToken);

      // A request the shim cannot parse fails locally: NULL and this thread's last error.
      assertNull(lib.llama2_shim_generate(h, Utf8.cString("{\"prompt\": "), 1000, null, null, len));
      assertTrue(NativeShim.lastError().contains("JSON object"), NativeShim.lastError());
      // An id the caller may not reuse while it is in flight is assigned and reported by the shim.
      byte[] id = new byte[129];
      CompletableFuture<String> fin = new CompletableFuture<>();
      NativeShim.FinalFn onFinal = new NativeShim.FinalFn() {
        @Override
        public void invoke(Pointer user, Pointer json, int n) {
          fin.complete(new String(json.getByteArray(0, n), StandardCharsets.UTF_8));
        }
      };
      assertEquals(0, lib.llama2_shim_generate_async(h, Utf8.cString("{\"prompt\":\"x\",\"max_new_tokens\":2}"),
          null, onFinal, null, id, id.length));
      String assigned = new String(id, 0, indexOfNul(id), StandardCharsets.UTF_8);
      assertTrue(assigned.matches("c\\d+-\\d+"), assigned);
      Map<String, Object> ev = Json.parseObject(fin.get(10, TimeUnit.SECONDS));
      assertEquals(assigned, ev.get("id"));
      java.lang.ref.Reference.reachabilityFence(onFinal);
    } catch (Exception e) {
      throw new AssertionError(e);
    } finally {
      lib.llama2_shim_close(h);
    }
  }

  private static int indexOfNul(byte[] b) {
    for (int i = 0; i < b.length; i++) if (b[i] == 0) return i;
    return b.length;
  }

  /** The server's refusals become the typed exceptions. */
  @Test
  void serverErrorsAreTyped() throws Exception {
    GenerationParams huge = GenerationParams.builder().maxNewTokens(100000).build();
    PromptTooLongException e = assertThrows(PromptTooLongException.class, () -> client.generate("x", huge));
    assertEquals("prompt_too_long", e.code());
    Generation g = client.stream("x", huge, (t, i, id) -> { });
    assertThrows(PromptTooLongException.class, g::await);
    try (TokenStream ts = client.tokens("x", huge)) {
      assertThrows(PromptTooLongException.class, ts::hasNext);
    }

    // A key the server does not know (sent raw through the shim) -> invalid_request naming it.
    NativeShim.Lib lib = NativeShim.lib();
    Pointer h = lib.llama2_shim_connect(Utf8.cString(server.socket), 2000);
    try {
      IntByReference len = new IntByReference();
      Pointer r = lib.llama2_shim_generate(h, Utf8.cString("{\"prompt\":\"x\",\"max_tokens\":5}"),
          10000, null, null, len);
      Map<String, Object> ev = Json.parseObject(NativeShim.take(r, len.getValue()));
      InvalidRequestException ir = assertThrows(InvalidRequestException.class,
          () -> Events.completion(ev, null, null));
      assertTrue(ir.getMessage().contains("max_tokens"), ir.getMessage());
    } finally {
      lib.llama2_shim_close(h);
    }
    // A prompt Java cannot encode as UTF-8 is refused before it is sent.
    assertThrows(InvalidRequestException.class, () -> client.generate("bad \uDC00 surrogate"));
  }

  @Test
  void healthAndStatsPassThrough() {
    Map<String, Object> h = client.health();
    assertEquals("health", h.get("event"));
    assertEquals("ready", h.get("status"));
    assertEquals(2L, h.get("ranks"));
    assertTrue(client.stats().contains("llama2_requests_total"));
    assertTrue(client.isConnected());
  }
}
