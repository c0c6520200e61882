package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** SIGKILL of the whole job mid-stream: every pending call gets ServerUnavailableException promptly. */
@Timeout(120)
class ServerKilledTest {
  @Test
  void killedServerFailsEveryCallPromptly() throws Exception {
    // Room in the KV cache for three long generations at once.
    TestServer server = new TestServer("killed", TestServer.slowModel(), "--kv-cache-blocks", "1024");
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      GenerationParams p = GenerationParams.builder().maxNewTokens(4000).ignoreEos(true).build();
      CompletableFuture<Throwable> blocking = CompletableFuture.supplyAsync(() -> {
        try {
          client.generate("blocking", p);
          return null;
        } catch (Throwable t) {
          return t;
        }
      });
      AtomicInteger tokens = new AtomicInteger();
      Generation streamed = client.stream("callback", p, (t, i, id) -> tokens.incrementAndGet());
      AtomicInteger iterated = new AtomicInteger();
      CompletableFuture<Throwable> iterator = CompletableFuture.supplyAsync(() -> {
        try (TokenStream ts = client.tokens("iterator", p)) {
          for (String ignored : ts) iterated.incrementAndGet();
          return null;
        } catch (Throwable t) {
          return t;
        }
      });
      assertTrue(TestServer.await(Duration.ofSeconds(60), () -> tokens.get() > 2 && iterated.get() > 2
          && Json.num(server.health(), "running", 0) == 3), "three generations running");

      long t0 = System.nanoTime();
      server.killJob();
      long bound = 5000;
      assertTrue(blocking.get(bound, TimeUnit.MILLISECONDS) instanceof ServerUnavailableException,
          "blocking generate");
      assertTrue(iterator.get(bound, TimeUnit.MILLISECONDS) instanceof ServerUnavailableException,
          "iterator");
      ExecutionException ee = assertThrows(ExecutionException.class,
          () -> streamed.completion().get(bound, TimeUnit.MILLISECONDS));
      assertTrue(ee.getCause() instanceof ServerUnavailableException, String.valueOf(ee.getCause()));
      long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
      assertTrue(ms < bound, "all failed within " + ms + " ms of the kill");

      assertFalse(client.isConnected());
      assertThrows(ServerUnavailableException.class, () -> client.generate("after"));
      assertThrows(ServerUnavailableException.class, () -> client.healthJson());
      // The connection is known to be gone: the final event runs on the calling thread already.
      Generation late = client.stream("late", p, (t, i, id) -> { });
      assertTrue(late.isDone(), "failed before stream() returned");
      assertThrows(ServerUnavailableException.class, late::await);
      try (TokenStream ts = client.tokens("late", p)) {
        assertThrows(ServerUnavailableException.class, ts::hasNext);
      }
      // Once the job is gone (killJob waited for every process), nobody listens on the socket.
      ServerUnavailableException e = assertThrows(ServerUnavailableException.class,
          () -> Llama2Client.connect(server.socket));
      assertTrue(e.getMessage().contains("not running"), e.getMessage());
    } finally {
      server.killJob();
    }
  }
}
