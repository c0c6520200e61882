package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The OpenAI-compatible HTTP front of a real {@code mpirun -np 2 llama2 serve --http} through the
 * JDK's own {@link HttpClient} (no OpenAI library): a streamed chat completion read as SSE lines,
 * and a non-streamed one whose text the stream must reproduce.
 */
class HttpFrontTest {
  private static TestServer server;
  private static URI base;
  private static final HttpClient HTTP =
      HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(10)).build();
  private static final String CHAT = "{\"model\":\"tiny-gqa\",\"temperature\":0,\"max_tokens\":16,"
      + "\"ignore_eos\":true,\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
      + "{\"role\":\"user\",\"content\":\"Hello from Java\"}]";

  @BeforeAll
  static void start() throws Exception {
    server = new TestServer("http", TestServer.MODEL, "--http", "127.0.0.1:0");
    Pattern p = Pattern.compile("HTTP on 127\\.0\\.0\\.1:(\\d+)");
    long deadline = System.nanoTime() + Duration.ofSeconds(30).toNanos();
    while (System.nanoTime() < deadline) {
      Matcher m = p.matcher(Files.readString(server.log));
      if (m.find()) {
        base = URI.create("http://127.0.0.1:" + m.group(1));
        return;
      }
      Thread.sleep(50);
    }
    fail("the server did not report its HTTP port:\n" + server.logText());
  }

  @AfterAll
  static void stop() throws Exception {
    if (server != null) server.close();
  }

  private static HttpRequest post(String body) {
    return HttpRequest.newBuilder(base.resolve("/v1/chat/completions"))
        .timeout(Duration.ofSeconds(60))
        .header("Content-Type", "application/json")
        .POST(HttpRequest.BodyPublishers.ofString(body))
        .build();
  }

  @SuppressWarnings("unchecked")
  private static String content(Map<String, Object> chunk, String field) {
    List<Object> choices = (List<Object>) chunk.get("choices");
    if (choices.isEmpty()) return "";
    Map<String, Object> delta = (Map<String, Object>) ((Map<String, Object>) choices.get(0)).get(field);
    Object c = delta.get("content");
    return c == null ? "" : (String) c;
  }

  @Test
  @SuppressWarnings("unchecked")
  void streamedChatMatchesTheWholeAnswer() throws Exception {
    HttpResponse<String> whole = HTTP.send(post(CHAT + "}"), HttpResponse.BodyHandlers.ofString());
    assertEquals(200, whole.statusCode(), whole.body());
    Map<String, Object> answer = Json.parseObject(whole.body());
    String expected = content(answer, "message");
    assertEquals(16L, ((Number) ((Map<String, Object>) answer.get("usage")).get("completion_tokens")).longValue());

    HttpResponse<java.util.stream.Stream<String>> stream =
        HTTP.send(post(CHAT + ",\"stream\":true}"), HttpResponse.BodyHandlers.ofLines());
    assertEquals(200, stream.statusCode());
    assertTrue(stream.headers().firstValue("content-type").orElse("").startsWith("text/event-stream"));
    List<String> data = stream.body().filter(l -> l.startsWith("data: "))
        .map(l -> l.substring(6)).collect(Collectors.toList());
    assertEquals("[DONE]", data.get(data.size() - 1));
    StringBuilder text = new StringBuilder();
    for (String d : data.subList(0, data.size() - 1)) text.append(content(Json.parseObject(d), "delta"));
    assertEquals(expected, text.toString());
    assertTrue(data.size() >= 4, "a stream of " + data.size() + " events");
  }

  @Test
  void anUnknownModelIs404InOpenAiShape() throws Exception {
    HttpResponse<String> r = HTTP.send(post(CHAT.replace("tiny-gqa", "gpt-4") + "}"),
        HttpResponse.BodyHandlers.ofString());
    assertEquals(404, r.statusCode());
    assertTrue(r.body().contains("\"code\":\"model_not_found\""), r.body());
  }
}
