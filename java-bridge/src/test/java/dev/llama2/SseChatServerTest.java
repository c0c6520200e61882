package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.llama2.example.SseChatServer;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.lang.management.ManagementFactory;
import java.lang.management.ThreadMXBean;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.NetworkInterface;
import java.net.Socket;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * The SSE example in front of the slow model: streaming to [DONE] (prompt and chat dialog), 429,
 * disconnect (while streaming and while queued), threads after a burst of disconnects, health.
 */
@Timeout(90)
class SseChatServerTest {
  static TestServer engine;
  static Llama2Client client;
  static SseChatServer sse;
  static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1)
      .connectTimeout(Duration.ofSeconds(5)).build();

  @BeforeAll
  static void start() throws Exception {
    engine = TestServer.slow();
    client = Llama2Client.connect(engine.socket);
    // One generation at a time, 300 ms for a permit, 60 s per generation, 5 handler threads, a
    // heartbeat every 500 ms.
    sse = new SseChatServer(client, new InetSocketAddress("127.0.0.1", 0),
        new SseChatServer.Config(1, Duration.ofMillis(300), Duration.ofSeconds(60), 128, 5,
            Duration.ofMillis(500)));
    sse.start();
  }

  @AfterAll
  static void stop() {
    if (sse != null) sse.close();
    if (client != null) client.close();
  }

  @AfterEach
  void engineIsIdle() throws InterruptedException {
    assertTrue(engine.awaitIdle(Duration.ofSeconds(20)), "engine idle: " + engine.health());
  }

  static URI uri(String pathAndQuery) {
    return URI.create("http://127.0.0.1:" + sse.port() + pathAndQuery);
  }

  static String enc(String s) {
    return URLEncoder.encode(s, StandardCharsets.UTF_8);
  }

  /**
   * The text of an SSE body: JSON-decoded data lines up to [DONE]; comments (the heartbeat) are
   * skipped; fails on anything else.
   */
  static String textOf(List<String> lines) {
    StringBuilder text = new StringBuilder();
    boolean done = false;
    for (String line : lines) {
      if (line.isEmpty() || line.startsWith(":")) continue;
      assertTrue(!done, "nothing after [DONE]: " + line);
      assertTrue(line.startsWith("data: "), "SSE data line: " + line);
      String data = line.substring(6);
      if (data.equals("[DONE]")) {
        done = true;
      } else {
        text.append((String) Json.parse(data));
      }
    }
    assertTrue(done, "stream ends with data: [DONE]");
    return text.toString();
  }

  @Test
  void getAndPostStreamToDone() throws Exception {
    String prompt = "北京 café 🍂\nsecond line";
    GenerationParams p = GenerationParams.builder().temperature(0).maxNewTokens(12).ignoreEos(true).build();
    String expected = client.generate(prompt, p).text();

    HttpResponse<java.util.stream.Stream<String>> r = HTTP.send(HttpRequest.newBuilder(
        uri("/chat?prompt=" + enc(prompt) + "&temperature=0&max_new_tokens=12&ignore_eos=true")).build(),
        HttpResponse.BodyHandlers.ofLines());
    assertEquals(200, r.statusCode());
    assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
    assertEquals(expected, textOf(r.body().toList()));

    String body = "{\"prompt\":" + Json.quote(prompt) + ",\"temperature\":0,\"max_new_tokens\":12,"
        + "\"ignore_eos\":true}";
    HttpResponse<java.util.stream.Stream<String>> post = HTTP.send(HttpRequest.newBuilder(uri("/chat"))
        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build(),
        HttpResponse.BodyHandlers.ofLines());
    assertEquals(200, post.statusCode());
    assertEquals(expected, textOf(post.body().toList()));
  }

  static final List<ChatMessage> DIALOG = List.of(ChatMessage.system("Answer briefly."),
      ChatMessage.user("北京 café 🍂: what is it?"), ChatMessage.assistant("A place.\nTwo lines."),
      ChatMessage.user("And the socket?"));

  /** {@code [{"role": ..., "content": ...}, ...]}. */
  static String messagesJson(List<ChatMessage> dialog) {
    StringBuilder b = new StringBuilder("[");
    for (ChatMessage m : dialog) {
      if (b.length() > 1) b.append(',');
      b.append("{\"role\":\"").append(m.role().wire()).append("\",\"content\":")
          .append(Json.quote(m.content())).append('}');
    }
    return b.append(']').toString();
  }

  static HttpResponse<String> post(SseChatServer server, String body) throws Exception {
    return HTTP.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + server.port() + "/chat"))
        .POST(HttpRequest.BodyPublishers.ofString(body, StandardCharsets.UTF_8)).build(),
        HttpResponse.BodyHandlers.ofString());
  }

  /** POST /chat with "messages" streams the dialog's answer: the text of client.chat (greedy). */
  @Test
  void chatDialogStreamsToDone() throws Exception {
    GenerationParams p = GenerationParams.builder().temperature(0).maxNewTokens(12).ignoreEos(true).build();
    String expected = client.chat(DIALOG, p).text();
    HttpResponse<String> r = post(sse, "{\"messages\":" + messagesJson(DIALOG)
        + ",\"temperature\":0,\"max_new_tokens\":12,\"ignore_eos\":true}");
    assertEquals(200, r.statusCode(), r.body());
    assertTrue(r.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
    assertEquals(expected, textOf(r.body().lines().toList()));
  }

  /**
   * A malformed "messages", or one beside "prompt", is 400 naming the problem; a dialog that breaks
   * the Llama-2 order rule gets the engine's refusal (400: it comes before the stream starts; a
   * 10 s heartbeat makes sure of that on a loaded machine).
   */
  @Test
  void badDialogsAre400NamingTheProblem() throws Exception {
    Map<String, String> cases = Map.of(
        "{\"messages\":\"hello\"}", "\"messages\" must be an array of {\"role\", \"content\"} objects (got a string",
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},7]}", "messages[1] must be an object",
        "{\"messages\":[{\"role\":\"bot\",\"content\":\"a\"}]}",
        "messages[0].role must be one of \"system\", \"user\", \"assistant\" (got \"bot\")",
        "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content must be a string (got none)",
        "{\"messages\":[{\"role\":\"user\",\"content\":[]}]}", "messages[0].content must be a string (got an array)",
        "{\"prompt\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}",
        "give either \"prompt\" (a string) or \"messages\" (a chat dialog), not both");
    for (Map.Entry<String, String> c : cases.entrySet()) {
      HttpResponse<String> r = post(sse, c.getKey());
      assertEquals(400, r.statusCode(), c.getKey() + " -> " + r.body());
      Map<String, Object> err = Json.parseObject(r.body());
      assertEquals("invalid_request", err.get("code"), r.body());
      assertTrue(((String) err.get("message")).contains(c.getValue()), c.getKey() + " -> " + r.body());
    }
    try (SseChatServer patient = new SseChatServer(client, new InetSocketAddress("127.0.0.1", 0),
        new SseChatServer.Config(1, Duration.ofMillis(300), Duration.ofSeconds(60), 128, 5,
            Duration.ofSeconds(10)))) {
      patient.start();
      HttpResponse<String> r = post(patient, "{\"messages\":" + messagesJson(List.of(
          ChatMessage.user("a"), ChatMessage.user("b"))) + ",\"max_new_tokens\":4}");
      assertEquals(400, r.statusCode(), r.body());
      Map<String, Object> err = Json.parseObject(r.body());
      assertEquals("invalid_request", err.get("code"), r.body());
      assertTrue(((String) err.get("message")).contains("role 'user' where 'assistant' is expected"),
          r.body());
    }
  }

  @Test
  void badParametersAre400NamingTheParameter() throws Exception {
    HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(uri("/chat?prompt=x&temperature=-1")).build(),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(400, r.statusCode());
    assertTrue(r.body().contains("temperature"), r.body());
    HttpResponse<String> tooLong = HTTP.send(HttpRequest.newBuilder(
        uri("/chat?prompt=x&max_new_tokens=100000")).build(), HttpResponse.BodyHandlers.ofString());
    assertEquals(400, tooLong.statusCode());
    assertTrue(tooLong.body().contains("prompt_too_long"), tooLong.body());
  }

  /** A raw HTTP/1.1 request for a long /chat generation, nothing read yet. */
  static Socket sendChat(SseChatServer server, String prompt) throws Exception {
    Socket s = new Socket("127.0.0.1", server.port());
    s.setSoTimeout(30000);
    OutputStream out = s.getOutputStream();
    out.write(("GET /chat?prompt=" + enc(prompt) + "&max_new_tokens=4000&ignore_eos=true HTTP/1.1\r\n"
        + "Host: localhost\r\nAccept: text/event-stream\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.flush();
    return s;
  }

  /** A raw HTTP/1.1 connection reading /chat up to its first data line. */
  static Socket openStream(String prompt) throws Exception {
    return openStream(sse, prompt);
  }

  static Socket openStream(SseChatServer server, String prompt) throws Exception {
    Socket s = new Socket("127.0.0.1", server.port());
    s.setSoTimeout(30000);
    OutputStream out = s.getOutputStream();
    out.write(("GET /chat?prompt=" + enc(prompt) + "&max_new_tokens=4000&ignore_eos=true HTTP/1.1\r\n"
        + "Host: localhost\r\nAccept: text/event-stream\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
    out.flush();
    BufferedReader in = new BufferedReader(new InputStreamReader(s.getInputStream(), StandardCharsets.UTF_8));
    String status = in.readLine();
    assertTrue(status != null && status.contains(" 200 "), "status: " + status);
    StringBuilder seen = new StringBuilder();
    for (String line; (line = in.readLine()) != null; ) {
      seen.append(line).append('\n');
      if (line.startsWith("data: \"")) return s;
      assertTrue(!line.startsWith("data: "), "first event is a piece: " + seen);
    }
    throw new AssertionError("stream ended before its first data line: " + seen);
  }

  @Test
  void overloadIsAnswered429() throws Exception {
    Socket busy = openStream("keep the only slot busy");
    try {
      long t0 = System.nanoTime();
      HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(uri("/chat?prompt=more")).build(),
          HttpResponse.BodyHandlers.ofString());
      long ms = (System.nanoTime() - t0) / 1_000_000;
      assertEquals(429, r.statusCode(), r.body());
      assertEquals("1", r.headers().firstValue("retry-after").orElse(""));
      assertTrue(ms >= 250 && ms < 5000, "429 after waiting ~300 ms for a permit: " + ms + " ms");
    } finally {
      busy.close();
    }
  }

  @Test
  void clientDisconnectCancelsTheGeneration() throws Exception {
    Socket s = openStream("a long answer nobody will read");
    try {
      // The engine's gauges are refreshed after each step, so they may lag the first token a little.
      assertTrue(TestServer.await(Duration.ofSeconds(10), () -> {
        Map<String, Object> h = engine.health();
        return Json.num(h, "running", 0) == 1 && Json.num(h, "kv_blocks_used", 0) > 0;
      }), "generation running with KV blocks in use: " + engine.health());
    } finally {
      s.close();
    }
    // The next write fails, which closes the TokenStream, which cancels the generation.
    assertTrue(engine.awaitIdle(Duration.ofSeconds(15)), "cancelled after disconnect: " + engine.health());
  }

  static final ThreadMXBean THREADS = ManagementFactory.getThreadMXBean();

  /**
   * 40 clients ask for long generations and go away at once (one of them gets the only slot, the
   * others wait for it and are answered 429). Within 20 s the JVM has about as many threads as
   * before: the example must neither keep a thread per connection it ever had nor leave threads
   * behind for clients that are gone (it grew 26 -> 76 threads after such bursts).
   */
  @Test
  void burstOfDisconnectsLeavesNoThreads() throws Exception {
    int before = THREADS.getThreadCount();
    List<Socket> burst = new ArrayList<>();
    try {
      burst.add(openStream("the one that streams"));
      for (int i = 0; i < 39; i++) burst.add(sendChat(sse, "burst " + i));
    } finally {
      for (Socket s : burst) s.close();
    }
    int[] now = {0};
    boolean back = TestServer.await(Duration.ofSeconds(20), () -> {
      now[0] = THREADS.getThreadCount();
      return now[0] <= before + 8;
    });
    assertTrue(back, "threads: " + before + " before the burst, " + now[0] + " 20 s after");
  }

  /**
   * A client that goes away while its generation waits in the engine's queue (before its first
   * token) must cancel it at once, not hold a slot, a permit and a thread until its timeout.
   */
  @Test
  void disconnectWhileQueuedCancelsTheGeneration() throws Exception {
    // Two generations at once in front of an engine with one batch slot and one queue place.
    try (SseChatServer two = new SseChatServer(client, new InetSocketAddress("127.0.0.1", 0),
        new SseChatServer.Config(2, Duration.ofMillis(300), Duration.ofSeconds(60), 128))) {
      two.start();
      Socket running = openStream(two, "the one that runs");
      try {
        Socket queued = sendChat(two, "the one that waits");
        assertTrue(TestServer.await(Duration.ofSeconds(10),
            () -> Json.num(engine.health(), "queued", 0) == 1), "queued: " + engine.health());
        queued.close();
        boolean cancelled = TestServer.await(Duration.ofSeconds(10),
            () -> Json.num(engine.health(), "queued", 0) == 0);
        assertTrue(cancelled, "queued generation cancelled after its client left: " + engine.health());
      } finally {
        running.close();
      }
    }
  }

  /**
   * The example as a program: it listens on the loopback address unless told otherwise (not on
   * every interface), and refuses an unknown option naming the allowed ones.
   */
  @Test
  void mainListensOnLoopbackByDefault() throws Exception {
    String java = ProcessHandle.current().info().command().orElse("java");
    List<String> cmd = List.of(java, "-cp", System.getProperty("llama2.classpath"),
        "-Djna.library.path=" + System.getProperty("jna.library.path"),
        "dev.llama2.example.SseChatServer", "--socket", engine.socket, "--port", "0");
    Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
    try {
      BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
      String line = out.readLine();
      while (line != null && !line.startsWith("SSE chat on ")) line = out.readLine();  // JVM notes
      assertTrue(line != null && line.startsWith("SSE chat on http://127.0.0.1:"), "banner: " + line);
      int port = Integer.parseInt(line.replaceAll(".*:(\\d+)/chat.*", "$1"));
      HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(
          URI.create("http://127.0.0.1:" + port + "/health")).build(), HttpResponse.BodyHandlers.ofString());
      assertEquals(200, r.statusCode(), r.body());
      // Not reachable through another address of this machine (when it has one).
      for (InetAddress a : Collections.list(NetworkInterface.getNetworkInterfaces()).stream()
          .flatMap(i -> Collections.list(i.getInetAddresses()).stream())
          .filter(a -> !a.isLoopbackAddress() && !a.isLinkLocalAddress()).toList()) {
        try (Socket s = new Socket()) {
          s.connect(new InetSocketAddress(a, port), 2000);
          throw new AssertionError("the example accepted a connection on " + a.getHostAddress());
        } catch (IOException refused) {
          // expected: nothing listens there
        }
      }
    } finally {
      p.destroy();
      p.waitFor(10, TimeUnit.SECONDS);
    }
    Process bad = new ProcessBuilder(java, "-cp", System.getProperty("llama2.classpath"),
        "dev.llama2.example.SseChatServer", "--socket", engine.socket, "--host", "0.0.0.0")
        .redirectErrorStream(true).start();
    assertTrue(bad.waitFor(30, TimeUnit.SECONDS));
    String msg = new String(bad.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertEquals(2, bad.exitValue(), msg);
    assertTrue(msg.startsWith("unknown option '--host' (allowed: --socket --bind --port"), msg);
  }

  @Test
  void healthPassesThroughTheEngineJson() throws Exception {
    HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(uri("/health")).build(),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(200, r.statusCode());
    Map<String, Object> h = Json.parseObject(r.body());
    assertEquals("health", h.get("event"));
    assertEquals("ready", h.get("status"));
    assertTrue(h.containsKey("kv_blocks_total") && h.containsKey("running"), r.body());
  }
}
