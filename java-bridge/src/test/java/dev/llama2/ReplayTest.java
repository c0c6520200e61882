package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;
import org.junit.jupiter.api.Timeout;

/**
 * Replays, through the JDK's HttpClient, the request bodies that Spring AI 1.x and LangChain4j send
 * to an OpenAI endpoint, against a real {@code mpirun -np 2 llama2 serve --http}. Each fixture in
 * java-bridge/tests/replay/ is one body (written from the framework's public source; "built_by"
 * names the class) and what its answer must satisfy ("expect"):
 *
 * <ul>
 *   <li>{@code status}: the HTTP status;
 *   <li>{@code finish_reason}: the allowed values, each also a value of Spring AI's
 *       {@code OpenAiApi.ChatCompletionFinishReason} (which fails to parse any other);
 *   <li>{@code llama2_finish_reason}: the server's own reason, when given;
 *   <li>{@code usage}: usage present and consistent (streamed: the include_usage chunk);
 *   <li>{@code tool_calls}: calls present, each with an id, a requested tool's name, and
 *       arguments valid against that tool's schema ({@link SchemaCheck}, not the server's code);
 *       {@code max_tool_calls} bounds their number;
 *   <li>{@code json_schema}: the content valid against the response_format's schema;
 *   <li>{@code error_param}, {@code error_contains}: an OpenAI error object naming the field.
 * </ul>
 *
 * <p>The model is random (made by CMake with models/docs-8m's tokenizer), so what it says is
 * arbitrary; the fixtures' schemas are bounded (enums, booleans, bounded integers) so that a
 * constrained answer ends by itself. A second server with a 1 s request timeout and 20 ms steps (a
 * test hook) takes the fixtures marked {@code "server": "short-timeout"}.
 */
@Timeout(240)
class ReplayTest {
  /** Spring AI 1.x's OpenAiApi.ChatCompletionFinishReason, by its JSON names. */
  static final Set<String> SPRING_AI_FINISH_REASONS =
      Set.of("stop", "length", "content_filter", "tool_calls", "tool_call");
  static final String MODEL = TestServer.REPLAY_MODEL_NAME;
  static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  static TestServer main;
  static TestServer shortTimeout;
  static URI mainBase;
  static URI shortBase;

  @BeforeAll
  static void start() throws Exception {
    String model = System.getProperty("llama2.replayModel");
    main = TestServer.replay();
    shortTimeout = new TestServer("replay-timeout", model, Map.of("LLAMA2_TEST_STEP_DELAY_MS", "20"),
        "--http", "127.0.0.1:0", "--served-model-name", MODEL, "--request-timeout-ms", "1000");
    mainBase = main.httpBase();
    shortBase = shortTimeout.httpBase();
  }

  @AfterAll
  static void stop() throws Exception {
    if (shortTimeout != null) shortTimeout.close();  // the shared one stops at JVM exit
  }

  @TestFactory
  Stream<DynamicTest> replays() throws IOException {
    Path dir = Path.of(System.getProperty("llama2.replayDir"));
    List<Path> files;
    try (Stream<Path> s = Files.list(dir)) {
      files = s.filter(p -> p.toString().endsWith(".json")).sorted().collect(Collectors.toList());
    }
    assertTrue(files.size() >= 10, "fixtures in " + dir + ": " + files);
    return files.stream().map(f -> DynamicTest.dynamicTest(f.getFileName().toString(), () -> replay(f)));
  }

  @SuppressWarnings("unchecked")
  static void replay(Path file) throws Exception {
    Map<String, Object> fixture = Json.parseObject(Files.readString(file));
    for (String key : List.of("client", "built_by", "what", "route", "body", "expect")) {
      assertNotNull(fixture.get(key), file + " has " + key);
    }
    Map<String, Object> body = (Map<String, Object>) fixture.get("body");
    Map<String, Object> expect = (Map<String, Object>) fixture.get("expect");
    Map<String, Object> sent = new LinkedHashMap<>(body);
    sent.put("model", MODEL);
    URI base = "short-timeout".equals(fixture.get("server")) ? shortBase : mainBase;
    HttpRequest req = HttpRequest.newBuilder(base.resolve((String) fixture.get("route")))
        .timeout(Duration.ofSeconds(120)).header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(Json.write(sent))).build();
    HttpResponse<String> r = HTTP.send(req, HttpResponse.BodyHandlers.ofString());
    String where = file.getFileName() + " (" + fixture.get("built_by") + "): " + r.body();
    assertEquals(((Number) expect.get("status")).intValue(), r.statusCode(), where);
    if (r.statusCode() != 200) {
      checkError(Json.parseObject(r.body()), expect, where);
      return;
    }
    boolean streamed = Boolean.TRUE.equals(body.get("stream"));
    assertEquals(streamed, r.headers().firstValue("content-type").orElse("")
        .startsWith("text/event-stream"), where);
    Answer a = streamed ? Answer.ofStream(r.body(), where) : Answer.ofWhole(r.body());
    checkAnswer(a, body, expect, where);
  }

  @SuppressWarnings("unchecked")
  static void checkError(Map<String, Object> answer, Map<String, Object> expect, String where) {
    Map<String, Object> error = (Map<String, Object>) answer.get("error");
    assertNotNull(error, where);
    String message = (String) error.get("message");
    assertEquals(expect.get("error_param"), error.get("param"), where);
    assertEquals("invalid_request_error", error.get("type"), where);
    for (Object part : (List<Object>) expect.get("error_contains")) {
      assertTrue(message.contains((String) part), "message says '" + part + "': " + where);
    }
  }

  @SuppressWarnings("unchecked")
  static void checkAnswer(Answer a, Map<String, Object> body, Map<String, Object> expect,
      String where) {
    assertTrue(SPRING_AI_FINISH_REASONS.contains(a.finishReason),
        "Spring AI's enum parses finish_reason " + a.finishReason + ": " + where);
    assertTrue(((List<Object>) expect.get("finish_reason")).contains(a.finishReason), where);
    if (expect.containsKey("llama2_finish_reason")) {
      assertEquals(expect.get("llama2_finish_reason"), a.llama2FinishReason, where);
    }
    if (Boolean.TRUE.equals(expect.get("usage"))) {
      assertNotNull(a.usage, "usage: " + where);
      long prompt = Json.num(a.usage, "prompt_tokens", -1);
      long completion = Json.num(a.usage, "completion_tokens", -1);
      assertTrue(prompt > 0 && completion >= 0, where);
      assertEquals(prompt + completion, Json.num(a.usage, "total_tokens", -1), where);
    }
    if (Boolean.TRUE.equals(expect.get("tool_calls"))) {
      checkToolCalls(a, body, expect, where);
    } else {
      assertTrue(a.calls.isEmpty() || a.finishReason.equals("tool_calls"), where);
    }
    if (Boolean.TRUE.equals(expect.get("json_schema"))) {
      Map<String, Object> format = (Map<String, Object>) body.get("response_format");
      Map<String, Object> schema =
          (Map<String, Object>) ((Map<String, Object>) format.get("json_schema")).get("schema");
      Object value = Json.parse(a.content);
      assertEquals(List.of(), SchemaCheck.errors(value, schema), "content valid: " + where);
    }
  }

  @SuppressWarnings("unchecked")
  static void checkToolCalls(Answer a, Map<String, Object> body, Map<String, Object> expect,
      String where) {
    Map<String, Map<String, Object>> schemas = new LinkedHashMap<>();
    for (Object t : (List<Object>) body.get("tools")) {
      Map<String, Object> f = (Map<String, Object>) ((Map<String, Object>) t).get("function");
      schemas.put((String) f.get("name"), (Map<String, Object>) f.get("parameters"));
    }
    assertFalse(a.calls.isEmpty(), "tool calls: " + where);
    assertTrue(a.content == null || a.content.isEmpty(), "no content beside calls: " + where);
    if (expect.get("max_tool_calls") instanceof Number) {
      assertTrue(a.calls.size() <= ((Number) expect.get("max_tool_calls")).intValue(), where);
    }
    for (Call c : a.calls) {
      assertTrue(c.id != null && c.id.matches("call_[0-9a-f]{24}"), "call id " + c.id + ": " + where);
      assertTrue(schemas.containsKey(c.name), "a requested tool: " + c.name + ": " + where);
      Object args = Json.parse(c.arguments.toString());
      assertEquals(List.of(), SchemaCheck.errors(args, schemas.get(c.name)), "arguments: " + where);
    }
  }

  /** One tool call, whole or reassembled from streamed deltas. */
  static final class Call {
    String id;
    String name;
    final StringBuilder arguments = new StringBuilder();
  }

  /** What a client reads from an answer, whole or streamed. */
  static final class Answer {
    String content;
    String finishReason;
    String llama2FinishReason;
    Map<String, Object> usage;
    final List<Call> calls = new ArrayList<>();

    @SuppressWarnings("unchecked")
    static Answer ofWhole(String text) {
      Map<String, Object> r = Json.parseObject(text);
      assertEquals("chat.completion", r.get("object"));
      Map<String, Object> choice = (Map<String, Object>) ((List<Object>) r.get("choices")).get(0);
      Answer a = new Answer();
      Map<String, Object> message = (Map<String, Object>) choice.get("message");
      assertEquals("assistant", message.get("role"));
      a.content = (String) message.get("content");
      a.finishReason = (String) choice.get("finish_reason");
      a.llama2FinishReason = (String) choice.get("llama2_finish_reason");
      a.usage = (Map<String, Object>) r.get("usage");
      if (message.get("tool_calls") instanceof List) {
        for (Object o : (List<Object>) message.get("tool_calls")) {
          Map<String, Object> tc = (Map<String, Object>) o;
          assertEquals("function", tc.get("type"));
          Map<String, Object> f = (Map<String, Object>) tc.get("function");
          Call c = new Call();
          c.id = (String) tc.get("id");
          c.name = (String) f.get("name");
          c.arguments.append((String) f.get("arguments"));
          a.calls.add(c);
        }
      }
      return a;
    }

    /** SSE: data chunks, then [DONE]; usage in a last chunk with empty choices. */
    @SuppressWarnings("unchecked")
    static Answer ofStream(String text, String where) {
      Answer a = new Answer();
      StringBuilder content = new StringBuilder();
      boolean done = false;
      for (String line : text.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        assertFalse(done, "nothing after [DONE]: " + where);
        if (line.equals("data: [DONE]")) {
          done = true;
          continue;
        }
        Map<String, Object> chunk = Json.parseObject(line.substring(6));
        assertEquals("chat.completion.chunk", chunk.get("object"), where);
        assertNull(chunk.get("error"), where);
        List<Object> choices = (List<Object>) chunk.get("choices");
        if (choices.isEmpty()) {
          a.usage = (Map<String, Object>) chunk.get("usage");
          continue;
        }
        assertTrue(chunk.containsKey("usage") && chunk.get("usage") == null,
            "include_usage: usage null in every choice chunk: " + where);
        Map<String, Object> choice = (Map<String, Object>) choices.get(0);
        Map<String, Object> delta = (Map<String, Object>) choice.get("delta");
        if (delta.get("content") instanceof String) content.append((String) delta.get("content"));
        if (delta.get("tool_calls") instanceof List) a.addDeltas((List<Object>) delta.get("tool_calls"));
        if (choice.get("finish_reason") != null) {
          assertNull(a.finishReason, "one finish_reason: " + where);
          a.finishReason = (String) choice.get("finish_reason");
          a.llama2FinishReason = (String) choice.get("llama2_finish_reason");
        }
      }
      assertTrue(done, "ends with [DONE]: " + where);
      a.content = content.toString();
      return a;
    }

    @SuppressWarnings("unchecked")
    void addDeltas(List<Object> deltas) {
      for (Object o : deltas) {
        Map<String, Object> d = (Map<String, Object>) o;
        int index = ((Number) d.get("index")).intValue();
        while (calls.size() <= index) calls.add(new Call());
        Call c = calls.get(index);
        if (d.get("id") instanceof String) c.id = (String) d.get("id");
        Map<String, Object> f = Json.obj(d, "function");
        if (f.get("name") instanceof String) c.name = (String) f.get("name");
        if (f.get("arguments") instanceof String) c.arguments.append((String) f.get("arguments"));
      }
    }
  }
}
