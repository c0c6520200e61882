package dev.llama2;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * A call the model made ({@link Completion#toolCalls()}), or one given back in the history
 * ({@link ChatMessage#assistantToolCalls}).
 *
 * @param id        the call's id ({@code call_} + 24 hex digits from the server); a
 *                  {@link ChatMessage#tool} result names it
 * @param name      the function's name
 * @param arguments the arguments as JSON text (valid under the tool's parameters schema when the
 *                  server made it), as OpenAI sends them
 */
public record ToolCall(String id, String name, String arguments) {
  public ToolCall {
    Objects.requireNonNull(id, "id");
    Objects.requireNonNull(name, "name");
    Objects.requireNonNull(arguments, "arguments");
  }

  /** The arguments parsed ({@link Json}: Maps, Lists, String, Long, Double, Boolean, null). */
  public Map<String, Object> argumentsMap() {
    return Json.parseObject(arguments);
  }

  Object toJson() {
    Map<String, Object> f = new LinkedHashMap<>();
    f.put("name", name);
    f.put("arguments", arguments);
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("id", id);
    m.put("type", "function");
    m.put("function", f);
    return m;
  }
}
