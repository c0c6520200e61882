package dev.llama2.example;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.llama2.ChatMessage;
import dev.llama2.Generation;
import dev.llama2.GenerationParams;
import dev.llama2.Json;
import dev.llama2.Llama2Client;
import dev.llama2.Llama2Exception;
import dev.llama2.TokenListener;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.Semaphore;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

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
 *   <li>{@code POST /chat} with {@code {"messages": [{"role": "system"|"user"|"assistant",
 *       "content": "..."}, ...], "max_new_tokens": N, ...}} instead of {@code prompt}: a chat
 *       dialog, streamed the same way through {@link Llama2Client#chatStream}; the engine encodes
 *       it in the Llama-2 chat format. A malformed {@code messages} (not an array, a bad role, a
 *       content that is missing or not a string) or one given together with {@code prompt} is
 *       answered 400 naming the problem; a dialog that breaks the engine's order rule (optional
 *       system first, then user and assistant alternating, starting and ending with user) gets the
 *       engine's {@code invalid_request} message, as 400 like every error that comes before the
 *       stream started (the engine checks a dialog before queueing it, so its refusal comes
 *       within the first heartbeat), else as an {@code event: error}.</li>
 *   <li>At most {@code maxConcurrent} generations at once (a {@link Semaphore}); a request that gets
 *       no permit within {@code permitWait} is answered 429 with {@code Retry-After}.</li>
 *   <li>Every generation has a timeout ({@code generationTimeout}). A client that disconnects
 *       cancels its generation: the next write fails. While no token comes (the generation waits
 *       in the engine's queue, or the engine is slow) an SSE comment ({@code : waiting}) is written
 *       every {@code heartbeat}, so a client that left is noticed then too.</li>
 *   <li>At most {@code handlerThreads} HTTP handler threads (idle ones end after 10 s); further
 *       requests wait for one in arrival order. A burst of connections costs no thread per
 *       connection.</li>
 *   <li>{@code GET /health}: the engine's health JSON passed through (503 when unavailable).</li>
 * </ul>
 *
 * <p>Run: {@code java -Djna.library.path=build/java-bridge -cp
 * build/java-bridge/llama2-java.jar:build/java-bridge/llama2-java-example.jar:/usr/share/java/jna.jar
 * dev.llama2.example.SseChatServer --socket /tmp/llama2.sock --port 8080} (listens on
 * 127.0.0.1 unless given {@code --bind ADDRESS}).
 */
public final class SseChatServer implements AutoCloseable {
  /**
   * Settings of the example. {@code handlerThreads} bounds the HTTP handler threads: the
   * {@code maxConcurrent} streams hold one each, the rest wait for a permit, answer 429 or serve
   * /health. {@code heartbeat}: how long a stream may stay silent before an SSE comment is written
   * (how soon a client that left is noticed while no token comes).
   */
  public record Config(int maxConcurrent, Duration permitWait, Duration generationTimeout,
                       int defaultMaxNewTokens, int handlerThreads, Duration heartbeat) {
    public Config {
      if (maxConcurrent < 1) throw new IllegalArgumentException("maxConcurrent must be >= 1");
      if (handlerThreads <= maxConcurrent) {
        throw new IllegalArgumentException("handlerThreads (" + handlerThreads
            + ") must exceed maxConcurrent (" + maxConcurrent + "): 429s and /health need threads too");
      }
      if (heartbeat.isNegative() || heartbeat.isZero()) {
        throw new IllegalArgumentException("heartbeat must be > 0");
      }
    }

    /** {@code maxConcurrent + 16} handler threads, a 2 s heartbeat. */
    public Config(int maxConcurrent, Duration permitWait, Duration generationTimeout,
                  int defaultMaxNewTokens) {
      this(maxConcurrent, permitWait, generationTimeout, defaultMaxNewTokens, maxConcurrent + 16,
          Duration.ofSeconds(2));
    }

    public static Config defaults() {
      return new Config(4, Duration.ofSeconds(2), Duration.ofSeconds(60), 128);
    }
  }

  private static final Object END = new Object();  // the generation ended (queue marker)

  private final Llama2Client client;
  private final Config config;
  private final Semaphore permits;
  private final HttpServer http;
  private final ThreadPoolExecutor executor;

  public SseChatServer(Llama2Client client, InetSocketAddress address, Config config)
      throws IOException {
    this.client = client;
    this.config = config;
    this.permits = new Semaphore(config.maxConcurrent(), /*fair=*/true);
    this.http = HttpServer.create(address, 0);
    // A bounded pool. A cached pool (the first version of this example) started a thread for
    // every connection of a burst and kept each for 60 s: 50 clients that came and went left 50
    // idle threads. Here requests beyond handlerThreads wait in the pool's queue (FIFO), and idle
    // threads end after 10 s.
    AtomicInteger n = new AtomicInteger();
    this.executor = new ThreadPoolExecutor(config.handlerThreads(), config.handlerThreads(),
        10, TimeUnit.SECONDS, new LinkedBlockingQueue<>(), r -> {
          Thread t = new Thread(r, "sse-http-" + n.incrementAndGet());
          t.setDaemon(true);
          return t;
        });
    executor.allowCoreThreadTimeOut(true);
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

  /** Starts the generation of one request: its prompt or its chat dialog. */
  @FunctionalInterface
  private interface Starter {
    Generation start(GenerationParams params, TokenListener listener);
  }

  private void chat(HttpExchange ex) throws IOException {
    try (ex) {
      Map<String, Object> args;
      GenerationParams params;
      Starter starter;
      try {
        args = arguments(ex);
        starter = starter(args);
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
        streamCompletion(ex, starter, params);
      } finally {
        permits.release();
      }
    }
  }

  /**
   * The request's prompt ({@code "prompt"}: a string) or chat dialog ({@code "messages"}), one of
   * the two; IllegalArgumentException naming the problem otherwise.
   */
  private Starter starter(Map<String, Object> args) {
    // A JSON null counts as absent, as in the engine's protocol.
    boolean hasPrompt = args.get("prompt") != null;
    if (args.get("messages") != null) {
      if (hasPrompt) {
        throw new IllegalArgumentException("give either \"prompt\" (a string) or \"messages\" "
            + "(a chat dialog), not both");
      }
      List<ChatMessage> dialog = messages(args.get("messages"));
      return (params, listener) -> client.chatStream(dialog, params, listener);
    }
    if (!hasPrompt) {
      throw new IllegalArgumentException("missing \"prompt\" (a string) or \"messages\" (a chat "
          + "dialog: [{\"role\", \"content\"}, ...])");
    }
    if (!(args.get("prompt") instanceof String)) {
      throw new IllegalArgumentException("\"prompt\" must be a string (got " + kind(args.get("prompt")) + ")");
    }
    String prompt = (String) args.get("prompt");
    return (params, listener) -> client.stream(prompt, params, listener);
  }

  private static final List<String> ROLES = List.of("system", "user", "assistant");

  /**
   * The dialog of {@code "messages"}: each entry an object with a {@code role} (system, user or
   * assistant) and a string {@code content} (other keys are ignored, as the engine does). The
   * order of the roles is the engine's rule: it answers a dialog that breaks it with
   * {@code invalid_request} naming the rule, so it is not repeated here.
   */
  private static List<ChatMessage> messages(Object value) {
    if (!(value instanceof List)) {
      throw new IllegalArgumentException("\"messages\" must be an array of {\"role\", \"content\"} "
          + "objects (got " + kind(value) + "; send it as JSON with POST)");
    }
    List<?> list = (List<?>) value;
    List<ChatMessage> dialog = new ArrayList<>(list.size());
    for (int i = 0; i < list.size(); i++) {
      String where = "messages[" + i + "]";
      if (!(list.get(i) instanceof Map)) {
        throw new IllegalArgumentException(where + " must be an object with \"role\" and "
            + "\"content\" (got " + kind(list.get(i)) + ")");
      }
      Map<?, ?> m = (Map<?, ?>) list.get(i);
      Object role = m.get("role");
      if (!(role instanceof String) || !ROLES.contains(role)) {
        throw new IllegalArgumentException(where + ".role must be one of \"system\", \"user\", "
            + "\"assistant\" (got " + (role instanceof String ? Json.quote((String) role) : kind(role))
            + ")");
      }
      Object content = m.get("content");
      if (!(content instanceof String)) {
        throw new IllegalArgumentException(where + ".content must be a string (got "
            + (m.containsKey("content") ? kind(content) : "none") + ")");
      }
      dialog.add(new ChatMessage(ChatMessage.Role.valueOf(((String) role).toUpperCase(Locale.ROOT)),
          (String) content));
    }
    return dialog;
  }

  /** What a JSON value is, for error messages. */
  private static String kind(Object v) {
    if (v == null) return "null";
    if (v instanceof String) return "a string";
    if (v instanceof Number) return "a number";
    if (v instanceof Boolean) return "a boolean";
    if (v instanceof List) return "an array";
    if (v instanceof Map) return "an object";
    return v.getClass().getSimpleName();
  }

  private void streamCompletion(HttpExchange ex, Starter starter, GenerationParams params)
      throws IOException {
    // Pieces arrive on the client's reader thread; this thread takes them with a time limit, so
    // that it can write a heartbeat while none comes (a blocking iterator would sit here, with
    // its thread and permit, until the generation ended, however long ago the client left).
    LinkedBlockingQueue<Object> pieces = new LinkedBlockingQueue<>();
    Generation g;
    try {
      g = starter.start(params, (text, index, tokenId) -> pieces.add(text));
    } catch (Llama2Exception e) {  // e.g. the client is closed, an unpaired surrogate
      sendJson(ex, statusOf(e), error(e.code(), e.getMessage()));
      return;
    }
    g.completion().whenComplete((c, e) -> pieces.add(END));
    long heartbeatMs = config.heartbeat().toMillis();
    try {
      // Wait for the first token (up to one heartbeat) before committing to 200, so that errors
      // the engine answers at once (queue_full, prompt_too_long, ...) get a proper status code.
      Object o = pieces.poll(heartbeatMs, TimeUnit.MILLISECONDS);
      if (o == END) {
        Llama2Exception failure = failureOf(g);
        if (failure != null) {
          sendJson(ex, statusOf(failure), error(failure.code(), failure.getMessage()));
          return;
        }
      }
      ex.getResponseHeaders().set("Content-Type", "text/event-stream; charset=utf-8");
      ex.getResponseHeaders().set("Cache-Control", "no-cache");
      ex.sendResponseHeaders(200, 0);  // chunked
      OutputStream out = ex.getResponseBody();
      // An IOException from a write = the client went away: the finally block cancels the
      // generation, which frees its KV blocks at once.
      for (; o != END; o = pieces.poll(heartbeatMs, TimeUnit.MILLISECONDS)) {
        if (o == null) {
          write(out, ": waiting\n\n");  // an SSE comment: clients ignore it
        } else if (!((String) o).isEmpty()) {
          write(out, "data: " + Json.quote((String) o) + "\n\n");
        }
      }
      Llama2Exception failure = failureOf(g);
      if (failure != null) {
        write(out, "event: error\ndata: " + error(failure.code(), failure.getMessage()) + "\n\n");
      } else {
        write(out, "data: [DONE]\n\n");
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();  // the server is closing
    } finally {
      g.cancel();  // a no-op once the generation has ended
    }
  }

  /** The failure of an ended generation, or null when it completed. */
  private static Llama2Exception failureOf(Generation g) throws InterruptedException {
    try {
      g.completion().get();
      return null;
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      return cause instanceof Llama2Exception
          ? (Llama2Exception) cause
          : new Llama2Exception("internal", String.valueOf(cause), g.requestId(), cause);
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

  private static final String USAGE = "usage: SseChatServer --socket PATH [--bind 127.0.0.1] "
      + "[--port 8080] [--max-concurrent 4] [--permit-wait-ms 2000] [--timeout-ms 60000]";
  private static final List<String> OPTIONS = List.of("--socket", "--bind", "--port",
      "--max-concurrent", "--permit-wait-ms", "--timeout-ms");

  /**
   * {@code --socket PATH [--bind 127.0.0.1] [--port 8080] [--max-concurrent 4]
   * [--permit-wait-ms 2000] [--timeout-ms 60000]}. It listens on the loopback address unless
   * {@code --bind} names another (e.g. {@code 0.0.0.0} for every interface, behind a proxy that
   * does TLS and authentication: the example does neither).
   */
  public static void main(String[] argv) throws Exception {
    Map<String, String> opt = new HashMap<>();
    for (int i = 0; i < argv.length; i += 2) {
      if (!OPTIONS.contains(argv[i]) || i + 1 >= argv.length) {
        System.err.println((OPTIONS.contains(argv[i]) ? argv[i] + " needs a value"
            : "unknown option '" + argv[i] + "' (allowed: " + String.join(" ", OPTIONS) + ")")
            + "\n" + USAGE);
        System.exit(2);
      }
      opt.put(argv[i], argv[i + 1]);
    }
    String socket = opt.get("--socket");
    if (socket == null) {
      System.err.println("--socket is required\n" + USAGE);
      System.exit(2);
    }
    Config cfg;
    InetSocketAddress address;
    try {
      cfg = new Config(Integer.parseInt(opt.getOrDefault("--max-concurrent", "4")),
          Duration.ofMillis(Long.parseLong(opt.getOrDefault("--permit-wait-ms", "2000"))),
          Duration.ofMillis(Long.parseLong(opt.getOrDefault("--timeout-ms", "60000"))), 128);
      String bind = opt.get("--bind");
      InetAddress host = bind == null ? InetAddress.getLoopbackAddress() : InetAddress.getByName(bind);
      address = new InetSocketAddress(host, Integer.parseInt(opt.getOrDefault("--port", "8080")));
    } catch (IllegalArgumentException | IOException e) {  // NumberFormatException included
      System.err.println("bad option value: " + e.getMessage() + "\n" + USAGE);
      System.exit(2);
      return;
    }
    Llama2Client client = Llama2Client.connect(socket);
    SseChatServer server = new SseChatServer(client, address, cfg);
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      server.close();
      client.close();
    }));
    server.start();
    System.err.println("SSE chat on http://" + address.getAddress().getHostAddress() + ":"
        + server.port() + "/chat?prompt=Hello");
  }
}
