package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Flow;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.logging.Handler;
import java.util.logging.Level;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link Llama2Client#publisher} on the tiny model: the pieces equal the blocking text, onNext
 * never runs ahead of request(n), errors are typed, and listener / subscriber failures reach the
 * {@code dev.llama2} System.Logger (read here through java.util.logging, the JDK's default).
 */
@Timeout(60)
class FlowPublisherTest {
  static TestServer server;
  static Llama2Client client;
  static final GenerationParams GREEDY =
      GenerationParams.builder().temperature(0).maxNewTokens(24).ignoreEos(true).build();

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.tiny();
    client = Llama2Client.connect(server.socket);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) client.close();
  }

  /** Records every signal; requests only what the test says. */
  static class Recorder implements Flow.Subscriber<Token> {
    final List<Token> tokens = new CopyOnWriteArrayList<>();
    final CompletableFuture<Void> end = new CompletableFuture<>();
    final AtomicLong outstanding = new AtomicLong();
    final AtomicInteger overruns = new AtomicInteger();
    final AtomicInteger subscribes = new AtomicInteger();
    volatile Flow.Subscription subscription;

    @Override
    public void onSubscribe(Flow.Subscription s) {
      subscribes.incrementAndGet();
      subscription = s;
    }

    void request(long n) {
      outstanding.addAndGet(n);
      subscription.request(n);
    }

    @Override
    public void onNext(Token t) {
      if (outstanding.decrementAndGet() < 0) overruns.incrementAndGet();
      tokens.add(t);
    }

    @Override
    public void onError(Throwable t) {
      end.completeExceptionally(t);
    }

    @Override
    public void onComplete() {
      end.complete(null);
    }

    String text() {
      StringBuilder b = new StringBuilder();
      for (Token t : tokens) b.append(t.text());
      return b.toString();
    }
  }

  static Recorder subscribe(Flow.Publisher<Token> p) throws InterruptedException {
    Recorder r = new Recorder();
    p.subscribe(r);
    assertTrue(TestServer.await(Duration.ofSeconds(5), () -> r.subscription != null), "onSubscribe");
    return r;
  }

  @Test
  void backPressureHoldsTokensUntilRequested() throws Exception {
    Completion reference = client.generate("Back pressure", GREEDY);
    Recorder r = subscribe(client.publisher("Back pressure", GREEDY));
    Thread.sleep(200);
    assertTrue(r.tokens.isEmpty(), "nothing before request");
    assertEquals(0, Json.num(server.health(), "running", -1), "no generation before request");
    r.request(2);
    // The server finishes all 24 tokens; the subscriber still has only the 2 it asked for.
    assertTrue(server.awaitIdle(Duration.ofSeconds(20)));
    Thread.sleep(100);
    assertEquals(2, r.tokens.size());
    assertFalse(r.end.isDone(), "no onComplete while tokens wait");
    for (int i = 0; i < 22; i++) r.request(1);
    r.end.get(10, TimeUnit.SECONDS);
    assertEquals(0, r.overruns.get(), "onNext never ran ahead of request(n)");
    assertEquals(1, r.subscribes.get());
    assertEquals(reference.text(), r.text());
    for (int i = 0; i < r.tokens.size(); i++) {
      assertEquals(i, r.tokens.get(i).index());
      assertEquals(reference.tokenIds().get(i), r.tokens.get(i).tokenId());
      assertNull(r.tokens.get(i).logprob());
    }
  }

  @Test
  void eachSubscriberGetsItsOwnGeneration() throws Exception {
    Flow.Publisher<Token> p = client.publisher("Twice",
        GREEDY.toBuilder().logprobs(true).topLogprobs(2).build());
    Recorder a = subscribe(p);
    Recorder b = subscribe(p);
    a.request(Long.MAX_VALUE);
    b.request(Long.MAX_VALUE);
    a.end.get(10, TimeUnit.SECONDS);
    b.end.get(10, TimeUnit.SECONDS);
    assertEquals(24, a.tokens.size());
    assertEquals(a.text(), b.text());
    assertNotNull(a.tokens.get(0).logprob());
    assertEquals(2, a.tokens.get(0).logprob().top().size());
  }

  @Test
  void errorEventsArriveTypedThroughOnError() throws Exception {
    Recorder r = subscribe(client.publisher("x", GREEDY.toBuilder().maxNewTokens(1_000_000).build()));
    r.request(1);
    Throwable t = assertFailsWith(r);
    assertTrue(t instanceof PromptTooLongException, String.valueOf(t));
    List<ChatMessage> badOrder = List.of(ChatMessage.assistant("Hi"), ChatMessage.user("Hello"));
    Recorder c = subscribe(client.chatPublisher(badOrder, GREEDY));
    c.request(5);
    Throwable e = assertFailsWith(c);
    assertTrue(e instanceof InvalidRequestException, String.valueOf(e));
  }

  @Test
  void requestOfZeroIsAnError() throws Exception {
    Recorder r = subscribe(client.publisher("zero", GREEDY));
    r.subscription.request(0);
    assertTrue(assertFailsWith(r) instanceof IllegalArgumentException);
    assertTrue(server.awaitIdle(Duration.ofSeconds(10)));
  }

  static Throwable assertFailsWith(Recorder r) throws Exception {
    try {
      r.end.get(10, TimeUnit.SECONDS);
    } catch (java.util.concurrent.ExecutionException e) {
      return e.getCause();
    }
    throw new AssertionError("completed normally: " + r.text());
  }

  /** A java.util.logging handler on the library's logger, for the duration of one test. */
  static final class Captured extends Handler implements AutoCloseable {
    final List<LogRecord> records = new CopyOnWriteArrayList<>();
    final Logger logger = Logger.getLogger("dev.llama2");

    final boolean parents = logger.getUseParentHandlers();

    Captured() {
      logger.addHandler(this);
      logger.setUseParentHandlers(false);  // the expected records stay out of the test output
    }

    @Override
    public void publish(LogRecord r) {
      records.add(r);
    }

    @Override
    public void flush() {}

    @Override
    public void close() {
      logger.removeHandler(this);
      logger.setUseParentHandlers(parents);
    }
  }

  @Test
  void listenerFailuresGoToTheSystemLogger() throws Exception {
    try (Captured log = new Captured()) {
      AtomicInteger calls = new AtomicInteger();
      Completion c = client.stream("Throwing listener", GREEDY, (text, index, id) -> {
        calls.incrementAndGet();
        if (index == 3) throw new IllegalStateException("listener bug");
      }).await();
      assertEquals(24, calls.get(), "the generation went on after the listener threw");
      assertEquals(24, c.completionTokens());
      assertEquals(1, log.records.size(), "one record: " + log.records);
      LogRecord rec = log.records.get(0);
      assertEquals(Level.WARNING, rec.getLevel());
      assertTrue(rec.getThrown() instanceof IllegalStateException);
      assertTrue(rec.getMessage().contains(c.requestId()), rec.getMessage());
    }
  }

  @Test
  void aThrowingSubscriberIsCancelledAndLogged() throws Exception {
    try (Captured log = new Captured()) {
      Recorder r = new Recorder() {
        @Override
        public void onNext(Token t) {
          super.onNext(t);
          throw new IllegalStateException("subscriber bug");
        }
      };
      client.publisher("Throwing subscriber", GREEDY).subscribe(r);
      assertTrue(TestServer.await(Duration.ofSeconds(5), () -> r.subscription != null));
      r.request(Long.MAX_VALUE);
      assertTrue(TestServer.await(Duration.ofSeconds(10), () -> !log.records.isEmpty()));
      assertTrue(server.awaitIdle(Duration.ofSeconds(10)));
      Thread.sleep(100);
      assertEquals(1, r.tokens.size(), "no signal after the throw");
      assertFalse(r.end.isDone());
      assertTrue(log.records.get(0).getThrown() instanceof IllegalStateException);
    }
  }
}
