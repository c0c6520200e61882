package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** 32 Java threads x 10 requests on one shared client: every request gets its own text. */
@Timeout(120)
class ConcurrencyTest {
  static final int THREADS = 32;
  static final int PER_THREAD = 10;
  static final String[] PROMPTS = {"Hello", "The weather in Paris", "北京的秋天", "Café crème ☕",
      "Once upon a time there was", "1 2 3", "Ünïcödé ✓", "A", "Write a poem about the sea",
      "emoji 🍂🐈", "Greek: αβγ", "Кириллица", "日本語のテキスト", "tab\tand\nnewline", "quotes \"x\"",
      "last one"};
  static TestServer server;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.tiny();  // 32 slots: every thread's request runs at once
  }

  /** Prompt k's parameters: even k greedy, odd k sampled with a fixed seed; lengths differ. */
  static GenerationParams params(int k) {
    GenerationParams.Builder b = GenerationParams.builder().maxNewTokens(8 + k).ignoreEos(true)
        .timeout(java.time.Duration.ofSeconds(60));
    return k % 2 == 0 ? b.temperature(0).build() : b.temperature(0.8).topK(50).seed(7000 + k).build();
  }

  @Test
  void manyThreadsShareOneClient() throws Exception {
    try (Llama2Client client = Llama2Client.connect(server.socket)) {
      // References, one request at a time.
      List<Completion> reference = new ArrayList<>();
      for (int k = 0; k < PROMPTS.length; k++) reference.add(client.generate(PROMPTS[k], params(k)));

      ConcurrentLinkedQueue<String> problems = new ConcurrentLinkedQueue<>();
      AtomicInteger completed = new AtomicInteger();
      CountDownLatch go = new CountDownLatch(1);
      ExecutorService pool = Executors.newFixedThreadPool(THREADS);
      List<Future<?>> futures = new ArrayList<>();
      for (int t = 0; t < THREADS; t++) {
        final int thread = t;
        futures.add(pool.submit(() -> {
          go.await();
          for (int i = 0; i < PER_THREAD; i++) {
            int k = (thread * PER_THREAD + i * 7) % PROMPTS.length;
            Completion expect = reference.get(k);
            String got;
            // Every API in turn: blocking, callback stream, iterator.
            switch ((thread + i) % 3) {
              case 0:
                got = client.generate(PROMPTS[k], params(k)).text();
                break;
              case 1: {
                StringBuilder sb = new StringBuilder();
                Completion c = client.stream(PROMPTS[k], params(k), (s, idx, id) -> sb.append(s)).await();
                if (!sb.toString().equals(c.text())) problems.add("callback text != completion text");
                if (!c.tokenIds().equals(expect.tokenIds())) problems.add("token ids differ for prompt " + k);
                got = c.text();
                break;
              }
              default: {
                StringBuilder sb = new StringBuilder();
                try (TokenStream ts = client.tokens(PROMPTS[k], params(k))) {
                  for (String s : ts) sb.append(s);
                }
                got = sb.toString();
              }
            }
            if (!got.equals(expect.text())) {
              problems.add("thread " + thread + " request " + i + " prompt " + k + ": got "
                  + Json.quote(got) + " expected " + Json.quote(expect.text()));
            } else {
              completed.incrementAndGet();
            }
          }
          return null;
        }));
      }
      go.countDown();
      for (Future<?> f : futures) f.get(100, TimeUnit.SECONDS);
      pool.shutdown();
      assertTrue(problems.isEmpty(), problems.size() + " problems, e.g. " + problems.peek());
      assertEquals(THREADS * PER_THREAD, completed.get());
      assertEquals(0, Calls.live(), "no generation left registered");
      assertTrue(server.awaitIdle(java.time.Duration.ofSeconds(5)), "server idle afterwards");
    }
  }
}
