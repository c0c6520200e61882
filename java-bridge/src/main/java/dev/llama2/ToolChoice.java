package dev.llama2;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * Whether the model must call a tool ({@link GenerationParams.Builder#toolChoice}), OpenAI's
 * {@code tool_choice}: {@link #NONE} (text; the tools are not shown), {@link #AUTO} (text or a
 * call: the default with tools), {@link #REQUIRED} (one or more calls), or {@link #function} (one
 * call of that function).
 */
public final class ToolChoice {
  public static final ToolChoice NONE = new ToolChoice("none", null);
  public static final ToolChoice AUTO = new ToolChoice("auto", null);
  public static final ToolChoice REQUIRED = new ToolChoice("required", null);

  private final String mode;
  private final String function;

  private ToolChoice(String mode, String function) {
    this.mode = mode;
    this.function = function;
  }

  /** One call of the named function (which must be among the tools). */
  public static ToolChoice function(String name) {
    return new ToolChoice("function", Objects.requireNonNull(name, "name"));
  }

  /** The function's name for {@link #function}, else null. */
  public String functionName() {
    return function;
  }

  Object toJson() {
    if (function == null) return mode;
    Map<String, Object> f = new LinkedHashMap<>();
    f.put("name", function);
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("type", "function");
    m.put("function", f);
    return m;
  }

  @Override
  public String toString() {
    return Json.write(toJson());
  }
}
