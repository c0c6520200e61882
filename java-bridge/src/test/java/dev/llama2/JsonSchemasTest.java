package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.math.BigDecimal;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.junit.jupiter.api.Test;

/**
 * JsonSchemas.of: each Java type's schema, written out by hand here from the JSON Schema
 * specification (draft 2020-12) and OpenAI's strict-mode rules, not from the helper's code.
 */
class JsonSchemasTest {
  /** Any annotation named Nullable with run-time retention counts (JSpecify's is TYPE_USE). */
  @Retention(RetentionPolicy.RUNTIME)
  @Target({ElementType.TYPE_USE, ElementType.FIELD, ElementType.RECORD_COMPONENT})
  @interface Nullable {}

  enum Unit { CELSIUS, FAHRENHEIT }

  record Scalars(String s, char c, int i, Long l, BigDecimal d, double x, boolean b, Unit u) {}

  @Test
  void scalars() {
    assertEquals("{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\"},"
        + "\"c\":{\"type\":\"string\"},\"i\":{\"type\":\"integer\"},\"l\":{\"type\":\"integer\"},"
        + "\"d\":{\"type\":\"number\"},\"x\":{\"type\":\"number\"},\"b\":{\"type\":\"boolean\"},"
        + "\"u\":{\"type\":\"string\",\"enum\":[\"CELSIUS\",\"FAHRENHEIT\"]}},"
        + "\"required\":[\"s\",\"c\",\"i\",\"l\",\"d\",\"x\",\"b\",\"u\"],"
        + "\"additionalProperties\":false}", JsonSchemas.of(Scalars.class));
  }

  record Nullables(Optional<String> a, @Nullable Integer b, @Nullable Unit c,
                   Optional<List<String>> d, String e) {}

  @Test
  void nullablesAreTypeArraysOrAnyOfAndNotRequired() {
    assertEquals("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":[\"string\",\"null\"]},"
        + "\"b\":{\"type\":[\"integer\",\"null\"]},"
        + "\"c\":{\"type\":[\"string\",\"null\"],\"enum\":[\"CELSIUS\",\"FAHRENHEIT\",null]},"
        + "\"d\":{\"anyOf\":[{\"type\":\"array\",\"items\":{\"type\":\"string\"}},{\"type\":\"null\"}]},"
        + "\"e\":{\"type\":\"string\"}},\"required\":[\"e\"],\"additionalProperties\":false}",
        JsonSchemas.of(Nullables.class));
  }

  record City(String name, int[] codes) {}

  record Trip(List<City> stops, Set<Unit> units, City[] extra, Optional<City> home) {}

  @Test
  void collectionsArraysAndNestedRecordsViaDefs() {
    String city = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
        + "\"codes\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"}}},"
        + "\"required\":[\"name\",\"codes\"],\"additionalProperties\":false}";
    assertEquals("{\"type\":\"object\",\"properties\":{"
        + "\"stops\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/City\"}},"
        + "\"units\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"enum\":[\"CELSIUS\",\"FAHRENHEIT\"]}},"
        + "\"extra\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/City\"}},"
        + "\"home\":{\"anyOf\":[{\"$ref\":\"#/$defs/City\"},{\"type\":\"null\"}]}},"
        + "\"required\":[\"stops\",\"units\",\"extra\"],\"additionalProperties\":false,"
        + "\"$defs\":{\"City\":" + city + "}}", JsonSchemas.of(Trip.class));
  }

  record Node(String label, List<Node> children, Optional<Leaf> leaf) {}

  record Leaf(int value, Optional<Leaf> next) {}

  @Test
  void recursiveTypesReferToThemselves() {
    assertEquals("{\"type\":\"object\",\"properties\":{\"label\":{\"type\":\"string\"},"
        + "\"children\":{\"type\":\"array\",\"items\":{\"$ref\":\"#\"}},"
        + "\"leaf\":{\"anyOf\":[{\"$ref\":\"#/$defs/Leaf\"},{\"type\":\"null\"}]}},"
        + "\"required\":[\"label\",\"children\"],\"additionalProperties\":false,"
        + "\"$defs\":{\"Leaf\":{\"type\":\"object\",\"properties\":{\"value\":{\"type\":\"integer\"},"
        + "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/Leaf\"},{\"type\":\"null\"}]}},"
        + "\"required\":[\"value\"],\"additionalProperties\":false}}}", JsonSchemas.of(Node.class));
  }

  static class Base {
    String id;
    static int ignoredStatic;
  }

  static class Bean extends Base {
    @Nullable String note;
    transient int ignoredTransient;
    boolean active;
  }

  @Test
  void pojoFieldsSuperclassFirst() {
    assertEquals("{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\"},"
        + "\"note\":{\"type\":[\"string\",\"null\"]},\"active\":{\"type\":\"boolean\"}},"
        + "\"required\":[\"id\",\"active\"],\"additionalProperties\":false}",
        JsonSchemas.of(Bean.class));
  }

  record Bad(Map<String, String> attributes) {}

  record Generic<T>(T value) {}

  @Test
  void unsupportedTypesNameThePath() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> JsonSchemas.of(Bad.class));
    assertTrue(e.getMessage().contains("Bad.attributes has type java.util.Map<java.lang.String, "
        + "java.lang.String>"), e.getMessage());
    e = assertThrows(IllegalArgumentException.class, () -> JsonSchemas.of(Generic.class));
    assertTrue(e.getMessage().contains("Generic.value has type T"), e.getMessage());
    assertThrows(IllegalArgumentException.class, () -> JsonSchemas.of(String.class));
  }

  @Test
  void theOutputParsesAsJson() {
    for (Class<?> c : List.of(Scalars.class, Nullables.class, Trip.class, Node.class, Bean.class)) {
      Json.parseObject(JsonSchemas.of(c));
    }
  }
}
