package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Cancel, early close, timeouts, queue full and close-while-busy on the slow model (one batch slot,
 * one queue place), where a generation lasts long enough to interrupt it. Every outcome must come
 * promptly: the bounds are far below the generation's own length and far above scheduling noise on
 * a loaded 2-core machine.
 */
@Timeout(90)
class SlowServerTest {
  static final int LONG = 4000;  // tokens: about 4 s on the slow model (2 ranks, 1 thread each)
  static final long PROMPT_MS = 8000;
  static TestServer server;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.slow();
  }

  /** Every test leaves the server idle: cancelled or abandoned requests free their KV blocks. */
  @AfterEach
  void serverIsIdle() throws InterruptedException {
    assertTrue(server.awaitIdle(Duration.ofSeconds(20)), "server idle: " + server.health());
  }

  static GenerationParams longParams() {
    return GenerationParams.builder().maxNewTokens(LONG).ignoreEos(true).temperature(0).build();
  }

  static long msSince(long t0) {
    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
  }

  @Test
  void cancelMidStream() throws Exception {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      AtomicInteger tokens = new AtomicInteger();
      Generation g = client.stream("long story", longParams(), (t, i, id) -> tokens.incrementAndGet());
      assertTrue(TestServer.await(Duration.ofSeconds(30), () -> tokens.get() >= 3), "tokens flow");
      long t0 = System.nanoTime();
      client.cancel(g.requestId());
      Completion c = g.completion().get(PROMPT_MS, TimeUnit.MILLISECONDS);
      assertEquals(FinishReason.CANCELLED, c.finishReason());
      assertTrue(c.completionTokens() < LONG && c.completionTokens() >= 3, "cancelled after "
          + c.completionTokens() + " tokens");
      assertEquals(c.completionTokens(), tokens.get(), "every token before the end was delivered");
      assertTrue(msSince(t0) < PROMPT_MS);
    }
  }

  @Test
  void closingTheIteratorEarlyCancels() throws Exception {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      TokenStream ts = client.tokens("long story", longParams());
      int read = 0;
      for (String ignored : ts) {
        if (++read == 3) break;
      }
      assertEquals(3, read);
      assertTrue(TestServer.await(Duration.ofSeconds(10),
          () -> Json.num(server.health(), "running", 0) == 1), "running: " + server.health());
      ts.close();
      assertFalse(ts.hasNext(), "a closed stream has no next element");
      // The server ends it: nothing running, no KV block used (long before LONG tokens).
      long t0 = System.nanoTime();
      assertTrue(server.awaitIdle(Duration.ofMillis(PROMPT_MS)), "cancelled on the server");
      assertTrue(TestServer.await(Duration.ofSeconds(5), () -> ts.completion() != null));
      assertEquals(FinishReason.CANCELLED, ts.completion().finishReason());
      assertTrue(msSince(t0) < PROMPT_MS);
    }
  }

  @Test
  void streamTimeout() throws Exception {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      GenerationParams p = longParams().toBuilder().timeout(Duration.ofMillis(1500)).build();
      long t0 = System.nanoTime();
      GenerationTimeoutException e;
      try (TokenStream ts = client.tokens("long story", p)) {
        e = assertThrows(GenerationTimeoutException.class, () -> {
          while (ts.hasNext()) ts.next();
        });
      }
      long ms = msSince(t0);
      assertTrue(ms >= 1400 && ms < 1500 + PROMPT_MS, "timed out after " + ms + " ms");
      assertNotNull(e.partial(), "the server reported the partial generation");
      assertEquals(FinishReason.TIMEOUT, e.partial().finishReason());
      assertTrue(e.partial().completionTokens() < LONG);
      assertEquals("timeout", e.code());
    }
  }

  @Test
  void blockingTimeout() {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      GenerationParams p = longParams().toBuilder().timeout(Duration.ofMillis(1500)).build();
      long t0 = System.nanoTime();
      GenerationTimeoutException e = assertThrows(GenerationTimeoutException.class,
          () -> client.generate("long story", p));
      long ms = msSince(t0);
      assertTrue(ms >= 1400 && ms < 1500 + PROMPT_MS, "timed out after " + ms + " ms");
      assertNotNull(e.partial(), "the server reported the partial generation");
      assertEquals(FinishReason.TIMEOUT, e.partial().finishReason());
      assertTrue(e.partial().completionTokens() < LONG);
    }
  }

  @Test
  void queueFull() throws Exception {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      AtomicInteger first = new AtomicInteger();
      Generation running = client.stream("hold", longParams(), (t, i, id) -> first.incrementAndGet());
      assertTrue(TestServer.await(Duration.ofSeconds(30), () -> first.get() > 0), "first runs");
      Generation queued = client.stream("wait", longParams(), (t, i, id) -> { });
      assertTrue(TestServer.await(Duration.ofSeconds(10), () -> Json.num(server.health(), "queued", 0) == 1));

      long t0 = System.nanoTime();
      QueueFullException e = assertThrows(QueueFullException.class,
          () -> client.generate("one too many", GenerationParams.builder().maxNewTokens(4).build()));
      assertTrue(msSince(t0) < 2000, "queue_full answered in " + msSince(t0) + " ms");
      assertEquals("queue_full", e.code());
      Generation third = client.stream("one too many", longParams(), (t, i, id) -> { });
      ExecutionException ee = assertThrows(ExecutionException.class,
          () -> third.completion().get(2, TimeUnit.SECONDS));
      assertTrue(ee.getCause() instanceof QueueFullException, String.valueOf(ee.getCause()));
      try (TokenStream ts = client.tokens("one too many", longParams())) {
        assertThrows(QueueFullException.class, ts::hasNext);
      }
      queued.cancel();
      running.cancel();
      assertEquals(FinishReason.CANCELLED, queued.completion().get(PROMPT_MS, TimeUnit.MILLISECONDS).finishReason());
      assertEquals(FinishReason.CANCELLED, running.completion().get(PROMPT_MS, TimeUnit.MILLISECONDS).finishReason());
    }
  }

  /** close() while other threads wait: they get ServerUnavailableException at once, no hang. */
  @Test
  void closeWhileBusy() throws Exception {
    Llama2Client client = Llama2Client.connect(server.socket);
    AtomicInteger tokens = new AtomicInteger();
    Generation streamed = client.stream("streamed", longParams(), (t, i, id) -> tokens.incrementAndGet());
    // The blocking one goes second, once the first runs: with --max-queue 1 a request that arrives
    // while another still waits for admission is refused.
    assertTrue(TestServer.await(Duration.ofSeconds(30), () -> tokens.get() > 0), "first runs");
    CompletableFuture<Throwable> blocking = CompletableFuture.supplyAsync(() -> {
      try {
        client.generate("blocking", longParams());
        return null;
      } catch (Throwable t) {
        return t;
      }
    });
    assertTrue(TestServer.await(Duration.ofSeconds(30),
        () -> Json.num(server.health(), "queued", 0) == 1), "second one queued: " + server.health());
    long t0 = System.nanoTime();
    client.close();
    assertTrue(blocking.get(PROMPT_MS, TimeUnit.MILLISECONDS) instanceof ServerUnavailableException);
    ExecutionException ee = assertThrows(ExecutionException.class,
        () -> streamed.completion().get(PROMPT_MS, TimeUnit.MILLISECONDS));
    assertTrue(ee.getCause() instanceof ServerUnavailableException, String.valueOf(ee.getCause()));
    assertTrue(msSince(t0) < PROMPT_MS);
    assertThrows(ServerUnavailableException.class, () -> client.generate("after close"));
    assertFalse(client.isConnected());
    client.close();  // idempotent
  }
}
