package dev.llama2.example;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.llama2.GenerationParams;
import dev.llama2.Json;
import dev.llama2.Llama2Client;
import dev.llama2.Llama2Exception;
import dev.llama2.TokenStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;

/**
 * Example: an HTTP front end on the JDK's own {@code com.sun.net.httpserver} that streams tokens as
 * Server-Sent Events, the pattern Java services use in front of an inference engine.
 *
 * <ul>
 *   <li>{@code GET /chat?prompt=...[&max_new_tokens=N&temperature=T&seed=S]} or {@code POST /chat}
 *       with {@code {"prompt": "...", "max_new_tokens": N, ...}}: {@code text/event-stream}, one
 *       {@code data: "<JSON string>"} event per non-empty piece (JSON-encoded, so newlines in the
 *       text cannot break the framing), then {@code data: [DONE]}. A failure after the stream
 *       started is one {@code event: error} with {@code {"code", "message"}}.</li>
 *   <li>At most {@code maxConcurrent} generations at once (a {@link Semaphore}); a request that gets
 *       no permit within {@code permitWait} is answered 429 with {@code Retry-After}.</li>
 *   <li>Every generation has a timeout ({@code generationTimeout}); a client that disconnects
 *       cancels its generation (the next write fails and closing the TokenStream cancels it).</li>
 *   <li>{@code GET /health}: the engine's health JSON passed through (503 when unavailable).</li>
 * </ul>
 *
 * <p>Run: {@code java -Djna.library.path=build/java-bridge -cp
 * build/java-bridge/llama2-java.jar:build/java-bridge/llama2-java-example.jar:/usr/share/java/jna.jar
 * dev.llama2.example.SseChatServer --socket /tmp/llama2.sock --port 8080}
 */
public final class SseChatServer implements AutoCloseable {
  /** Settings of the example. */
  public record Config(int maxConcurrent, Duration permitWait, Duration generationTimeout,
                       int defaultMaxNewTokens) {
    public static Config defaults() {
      return new Config(4, Duration.ofSeconds(2), Duration.ofSeconds(60), 128);
    }
  }

  private final Llama2Client client;
  private final Config config;
  private final Semaphore permits;
  private final HttpServer http;
  private final ExecutorService executor;

  public SseChatServer(Llama2Client client, InetSocketAddress address, Config config)
      throws IOException {
    this.client = client;
    this.config = config;
    this.permits = new Semaphore(config.maxConcurrent(), /*fair=*/true);
    this.http = HttpServer.create(address, 0);
    // Unbounded pool: the semaphore is the bound on generations; waiting for a permit or
    // answering 429 must not queue behind running streams.
    this.executor = Executors.newCachedThreadPool(r -> {
      Thread t = new Thread(r, "sse-http");
      t.setDaemon(true);
      return t;
    });
    http.setExecutor(executor);
    http.createContext("/chat", this::chat);
    http.createContext("/health", this::health);
  }

  public void start() {
    http.start();
  }

  /** The bound port (useful with port 0). */
  public int port() {
    return http.getAddress().getPort();
  }

  @Override
  public void close() {
    http.stop(0);
    executor.shutdownNow();
  }

  // ---- /chat ------------------------------------------------------------------------------------

  private void chat(HttpExchange ex) throws IOException {
    try (ex) {
      Map<String, Object> args;
      GenerationParams params;
      String prompt;
      try {
        args = arguments(ex);
        prompt = args.get("prompt") instanceof String ? (String) args.get("prompt") : null;
        if (prompt == null) throw new IllegalArgumentException("missing \"prompt\"");
        params = params(args);
      } catch (IllegalArgumentException e) {
        sendJson(ex, 400, error("invalid_request", e.getMessage()));
        return;
      } catch (UnsupportedOperationException e) {
        sendJson(ex, 405, error("method_not_allowed", e.getMessage()));
        return;
      }
      boolean permitted;
      try {
        permitted = permits.tryAcquire(config.permitWait().toMillis(), TimeUnit.MILLISECONDS);
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
        return;
      }
      if (!permitted) {
        ex.getResponseHeaders().set("Retry-After", "1");
        sendJson(ex, 429, error("overloaded", "all " + config.maxConcurrent()
            + " generation slots are busy; retry later"));
        return;
      }
      try {
        streamCompletion(ex, prompt, params);
      } finally {
        permits.release();
      }
    }
  }

  private void streamCompletion(HttpExchange ex, String prompt, GenerationParams params)
      throws IOException {
    try (TokenStream tokens = client.tokens(prompt, params)) {
      // Wait for the first token before committing to 200, so that errors the engine answers at
      // once (queue_full, prompt_too_long, ...) get a proper status code.
      boolean any;
      try {
        any = tokens.hasNext();
      } catch (Llama2Exception e) {
        sendJson(ex, statusOf(e), error(e.code(), e.getMessage()));
        return;
      }
      ex.getResponseHeaders().set("Content-Type", "text/event-stream; charset=utf-8");
      ex.getResponseHeaders().set("Cache-Control", "no-cache");
      ex.sendResponseHeaders(200, 0);  // chunked
      OutputStream out = ex.getResponseBody();
      try {
        while (any) {
          String piece = tokens.next();
          if (!piece.isEmpty()) {
            // IOException here = the client went away: leaving the try closes the TokenStream,
            // which cancels the generation and frees its KV blocks at once.
            write(out, "data: " + Json.quote(piece) + "\n\n");
          }
          any = tokens.hasNext();
        }
        write(out, "data: [DONE]\n\n");
      } catch (Llama2Exception e) {
        write(out, "event: error\ndata: " + error(e.code(), e.getMessage()) + "\n\n");
      }
    }
  }

  private static int statusOf(Llama2Exception e) {
    switch (e.code()) {
      case "queue_full": return 429;
      case "invalid_request":
      case "prompt_too_long": return 400;
      case "timeout": return 504;
      case "server_unavailable":
      case "shutting_down": return 503;
      default: return 500;
    }
  }

  private GenerationParams params(Map<String, Object> a) {
    GenerationParams.Builder b = GenerationParams.builder()
        .maxNewTokens(config.defaultMaxNewTokens())
        .timeout(config.generationTimeout());
    if (a.containsKey("max_new_tokens")) b.maxNewTokens(intArg(a, "max_new_tokens"));
    if (a.containsKey("temperature")) b.temperature(doubleArg(a, "temperature"));
    if (a.containsKey("top_p")) b.topP(doubleArg(a, "top_p"));
    if (a.containsKey("top_k")) b.topK(intArg(a, "top_k"));
    if (a.containsKey("seed")) {
      try {
        b.seed(Long.parseUnsignedLong(String.valueOf(a.get("seed"))));
      } catch (NumberFormatException e) {
        throw new IllegalArgumentException("seed must be an integer in [0, 2^64) (got " + a.get("seed") + ")");
      }
    }
    if (a.containsKey("ignore_eos")) b.ignoreEos(Boolean.parseBoolean(String.valueOf(a.get("ignore_eos"))));
    return b.build();
  }

  private static int intArg(Map<String, Object> a, String key) {
    try {
      return Integer.parseInt(String.valueOf(a.get(key)));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(key + " must be an integer (got " + a.get(key) + ")");
    }
  }

  private static double doubleArg(Map<String, Object> a, String key) {
    try {
      return Double.parseDouble(String.valueOf(a.get(key)));
    } catch (NumberFormatException e) {
      throw new IllegalArgumentException(key + " must be a number (got " + a.get(key) + ")");
    }
  }

  /** Query parameters (GET) or the JSON body (POST), as one map. */
  private static Map<String, Object> arguments(HttpExchange ex) throws IOException {
    String method = ex.getRequestMethod();
    if (method.equals("GET")) {
      Map<String, Object> m = new HashMap<>();
      String q = ex.getRequestURI().getRawQuery();
      if (q != null) {
        for (String kv : q.split("&")) {
          int eq = kv.indexOf('=');
          String k = URLDecoder.decode(eq < 0 ? kv : kv.substring(0, eq), StandardCharsets.UTF_8);
          String v = eq < 0 ? "" : URLDecoder.decode(kv.substring(eq + 1), StandardCharsets.UTF_8);
          m.put(k, v);
        }
      }
      return m;
    }
    if (method.equals("POST")) {
      byte[] body;
      try (InputStream in = ex.getRequestBody()) {
        body = in.readNBytes(1 << 20);
      }
      return Json.parseObject(new String(body, StandardCharsets.UTF_8));
    }
    throw new UnsupportedOperationException("use GET or POST (got " + method + ")");
  }

  // ---- /health ----------------------------------------------------------------------------------

  private void health(HttpExchange ex) throws IOException {
    try (ex) {
      String body;
      int status;
      try {
        body = client.healthJson();
        status = "ready".equals(Json.parseObject(body).get("status")) ? 200 : 503;
      } catch (Llama2Exception e) {
        body = error(e.code(), e.getMessage());
        status = 503;
      }
      sendJson(ex, status, body);
    }
  }

  // ---- helpers ----------------------------------------------------------------------------------

  private static String error(String code, String message) {
    return "{\"code\":" + Json.quote(code) + ",\"message\":" + Json.quote(String.valueOf(message)) + "}";
  }

  private static void sendJson(HttpExchange ex, int status, String json) throws IOException {
    byte[] b = json.getBytes(StandardCharsets.UTF_8);
    ex.getResponseHeaders().set("Content-Type", "application/json; charset=utf-8");
    ex.sendResponseHeaders(status, b.length);
    try (OutputStream out = ex.getResponseBody()) {
      out.write(b);
    }
  }

  private static void write(OutputStream out, String s) throws IOException {
    out.write(s.getBytes(StandardCharsets.UTF_8));
    out.flush();
  }

  /** {@code --socket PATH [--port 8080] [--max-concurrent 4] [--permit-wait-ms 2000] [--timeout-ms 60000]}. */
  public static void main(String[] argv) throws Exception {
    Map<String, String> opt = new HashMap<>();
    for (int i = 0; i + 1 < argv.length; i += 2) opt.put(argv[i], argv[i + 1]);
    String socket = opt.get("--socket");
    if (socket == null) {
      System.err.println("usage: SseChatServer --socket PATH [--port 8080] [--max-concurrent 4] "
          + "[--permit-wait-ms 2000] [--timeout-ms 60000]");
      System.exit(2);
    }
    Config cfg = new Config(Integer.parseInt(opt.getOrDefault("--max-concurrent", "4")),
        Duration.ofMillis(Long.parseLong(opt.getOrDefault("--permit-wait-ms", "2000"))),
        Duration.ofMillis(Long.parseLong(opt.getOrDefault("--timeout-ms", "60000"))), 128);
    Llama2Client client = Llama2Client.connect(socket);
    SseChatServer server = new SseChatServer(client,
        new InetSocketAddress(Integer.parseInt(opt.getOrDefault("--port", "8080"))), cfg);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      server.close();
      client.close();
    }));
    server.start();
    System.err.println("SSE chat on http://localhost:" + server.port() + "/chat?prompt=Hello");
  }
}
