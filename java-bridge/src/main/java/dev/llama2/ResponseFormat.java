package dev.llama2;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * The output constraint of {@link GenerationParams.Builder#responseFormat}: OpenAI's
 * {@code response_format} as the socket protocol takes it (docs/structured-output.md). The server
 * masks, at every step, the tokens that could not continue a valid output, so a generation that
 * ends with {@link FinishReason#STOP} is valid by construction; one cut by {@code max_new_tokens}
 * ({@link FinishReason#LENGTH}) is a prefix of a valid output.
 *
 * <pre>{@code
 * record Person(String name, int age) {}
 * GenerationParams p = GenerationParams.builder().responseFormat(ResponseFormat.jsonSchema(Person.class)).build();
 * }</pre>
 */
public final class ResponseFormat {
  /** The {@code type} of a response format. */
  public enum Type {
    /** No constraint. */
    TEXT,
    /** Any JSON object. */
    JSON_OBJECT,
    /** JSON valid under a schema. */
    JSON_SCHEMA
  }

  private static final ResponseFormat TEXT = new ResponseFormat(Type.TEXT, null, null);
  private static final ResponseFormat JSON_OBJECT = new ResponseFormat(Type.JSON_OBJECT, null, null);

  private final Type type;
  private final String name;
  private final String schema;  // JSON text of an object, checked

  private ResponseFormat(Type type, String name, String schema) {
    this.type = type;
    this.name = name;
    this.schema = schema;
  }

  /** {@code {"type": "text"}}: no constraint (the default). */
  public static ResponseFormat text() {
    return TEXT;
  }

  /** {@code {"type": "json_object"}}: any JSON object. */
  public static ResponseFormat jsonObject() {
    return JSON_OBJECT;
  }

  /**
   * {@code {"type": "json_schema", "json_schema": {"name": name, "schema": schema}}}: JSON valid
   * under {@code schemaJson} (JSON Schema text; the keywords the server supports are listed in
   * docs/structured-output.md, and it refuses others with {@link InvalidRequestException} naming
   * the keyword). Throws {@link IllegalArgumentException} when the text is not a JSON object.
   */
  public static ResponseFormat jsonSchema(String name, String schemaJson) {
    Objects.requireNonNull(name, "name");
    return new ResponseFormat(Type.JSON_SCHEMA, name, checkedObject("response_format", schemaJson));
  }

  /** {@link #jsonSchema(String, String)} with {@link JsonSchemas#of(Class)}, named after the class. */
  public static ResponseFormat jsonSchema(Class<?> type) {
    return new ResponseFormat(Type.JSON_SCHEMA, type.getSimpleName(), JsonSchemas.of(type));
  }

  public Type type() {
    return type;
  }

  /** The schema's name ({@link Type#JSON_SCHEMA}), else null. */
  public String name() {
    return name;
  }

  /** The schema as JSON text ({@link Type#JSON_SCHEMA}), else null. */
  public String schema() {
    return schema;
  }

  /** The protocol's {@code response_format} value. */
  Object toJson() {
    Map<String, Object> m = new LinkedHashMap<>();
    m.put("type", type.name().toLowerCase(java.util.Locale.ROOT));
    if (type == Type.JSON_SCHEMA) {
      Map<String, Object> js = new LinkedHashMap<>();
      js.put("name", name);
      js.put("schema", new Json.Raw(schema));
      js.put("strict", true);
      m.put("json_schema", js);
    }
    return m;
  }

  @Override
  public String toString() {
    return Json.write(toJson());
  }

  /** {@code json} if it is one JSON object (of well-formed Unicode), else IllegalArgumentException. */
  static String checkedObject(String param, String json) {
    Objects.requireNonNull(json, param);
    if (!Utf8.isWellFormed(json)) {
      throw new IllegalArgumentException(param + " schema is not valid Unicode (unpaired surrogate)");
    }
    try {
      Json.parseObject(json);
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException(param + " schema must be a JSON object: " + e.getMessage(), e);
    }
    return json;
  }
}
