package dev.llama2;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.regex.Pattern;

/**
 * A function the model may call ({@link GenerationParams.Builder#tools}): OpenAI's
 * {@code {"type": "function", "function": {"name", "description", "parameters"}}}. The server
 * writes the tools into the dialog and constrains a call's arguments to {@code parameters}
 * (docs/tool-calling.md).
 *
 * @param name           1 to 64 of {@code [a-zA-Z0-9_-]}
 * @param description    what it does, for the model; may be null
 * @param parametersJson its arguments' JSON Schema (an object schema), as JSON text
 */
public record Tool(String name, String description, String parametersJson) {
  private static final Pattern NAME = Pattern.compile("[a-zA-Z0-9_-]{1,64}");

  public Tool {
    Objects.requireNonNull(name, "name");
    if (!NAME.matcher(name).matches()) {
      throw new IllegalArgumentException("tools: a function name must match ^[a-zA-Z0-9_-]{1,64}$"
          + " (got \"" + name + "\")");
    }
    if (description != null && !Utf8.isWellFormed(description)) {
      throw new IllegalArgumentException("tools: the description of " + name
          + " is not valid Unicode (unpaired surrogate)");
    }
    parametersJson = ResponseFormat.checkedObject("tools: " + name + " parameters", parametersJson);
  }

  /** A function whose parameters are {@code parametersJson} (JSON Schema text). */
  public static Tool function(String name, String description, String parametersJson) {
    return new Tool(name, description, parametersJson);
  }

  /** A function whose parameters are a record's or POJO's fields ({@link JsonSchemas#of}). */
  public static Tool function(String name, String description, Class<?> parameters) {
    return new Tool(name, description, JsonSchemas.of(parameters));
  }

  Object toJson() {
    Map<String, Object> f = new LinkedHashMap<>();
    f.put("name", name);
    if (description != null) f.put("description", description);
    f.put("parameters", new Json.Raw(parametersJson));
    Map<String, Object> t = new LinkedHashMap<>();
    t.put("type", "function");
    t.put("function", f);
    return t;
  }
}
