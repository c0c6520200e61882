package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * On the slow model (a generation lasts seconds): Thread.interrupt() of a blocking generate, and a
 * Flow subscriber's cancel(), both cancel the generation on the server: its stats count one more
 * cancelled request, and nothing runs or holds KV blocks afterwards.
 */
@Timeout(90)
class InterruptTest {
  static TestServer server;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.slow();
  }

  @AfterEach
  void serverIsIdle() throws InterruptedException {
    assertTrue(server.awaitIdle(Duration.ofSeconds(20)), "server idle: " + server.health());
  }

  /** llama2_requests_total{finish_reason="cancelled"} from the server's stats. */
  static long cancelledTotal() {
    try (Llama2Client c = Llama2Client.connect(server.socket)) {
      Matcher m = Pattern.compile("(?m)^llama2_requests_total\\{finish_reason=\"cancelled\"\\} (\\d+)")
          .matcher(c.stats());
      return m.find() ? Long.parseLong(m.group(1)) : 0;
    }
  }

  static boolean running() {
    return Json.num(server.health(), "running", 0) == 1;
  }

  @Test
  void interruptingABlockingGenerateCancelsItOnTheServer() throws Exception {
    long before = cancelledTotal();
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      CompletableFuture<Throwable> outcome = new CompletableFuture<>();
      Thread caller = new Thread(() -> {
        try {
          client.generate("long story", SlowServerTest.longParams());
          outcome.complete(null);
        } catch (Throwable t) {
          outcome.complete(t);
          // The flag is set again for code further up.
          if (!Thread.currentThread().isInterrupted()) outcome.obtrudeValue(new AssertionError("flag lost"));
        }
      });
      caller.start();
      assertTrue(TestServer.await(Duration.ofSeconds(30), InterruptTest::running), "running");
      long t0 = System.nanoTime();
      caller.interrupt();
      Throwable t = outcome.get(5, TimeUnit.SECONDS);
      assertTrue(t instanceof GenerationInterruptedException, String.valueOf(t));
      assertEquals("interrupted", ((Llama2Exception) t).code());
      assertTrue(TestServer.await(Duration.ofSeconds(5), () -> cancelledTotal() == before + 1),
          "stats count it cancelled");
      assertTrue(server.awaitIdle(Duration.ofSeconds(5)), "KV blocks freed: " + server.health());
      assertTrue(SlowServerTest.msSince(t0) < SlowServerTest.PROMPT_MS);
      caller.join(5000);
    }
  }

  @Test
  void anInterruptedThreadSendsNothing() {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      Thread.currentThread().interrupt();
      try {
        client.generate("never sent", SlowServerTest.longParams());
        throw new AssertionError("no exception");
      } catch (GenerationInterruptedException e) {
        assertTrue(Thread.interrupted(), "the flag stays set (cleared here)");
      }
    }
  }

  @Test
  void cancellingTheSubscriptionCancelsOnTheServer() throws Exception {
    long before = cancelledTotal();
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      FlowPublisherTest.Recorder r = new FlowPublisherTest.Recorder();
      client.publisher("long story", SlowServerTest.longParams()).subscribe(r);
      assertTrue(TestServer.await(Duration.ofSeconds(5), () -> r.subscription != null));
      r.request(3);
      assertTrue(TestServer.await(Duration.ofSeconds(30), () -> r.tokens.size() == 3), "3 tokens");
      Flow.Subscription s = r.subscription;
      s.cancel();
      assertTrue(TestServer.await(Duration.ofSeconds(5), () -> cancelledTotal() == before + 1),
          "stats count it cancelled");
      assertTrue(server.awaitIdle(Duration.ofSeconds(5)), "KV blocks freed: " + server.health());
      r.request(10);  // after cancel: a no-op (rule 3.6)
      Thread.sleep(100);
      assertEquals(3, r.tokens.size());
      assertTrue(!r.end.isDone(), "no signal after cancel");
    }
  }
}
