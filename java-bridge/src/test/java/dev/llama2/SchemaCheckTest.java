package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The replay tests' validator catches what it must (so that their checks can fail). */
class SchemaCheckTest {
  static final Map<String, Object> SCHEMA = Json.parseObject("{\"type\":\"object\","
      + "\"properties\":{\"city\":{\"type\":\"string\",\"enum\":[\"PARIS\",\"ROME\"]},"
      + "\"days\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":7},"
      + "\"next\":{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]},"
      + "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":3},\"maxItems\":2}},"
      + "\"required\":[\"city\",\"days\"],\"additionalProperties\":false}");

  static List<String> errors(String json) {
    return SchemaCheck.errors(Json.parse(json), SCHEMA);
  }

  @Test
  void validValuesPass() {
    assertEquals(List.of(), errors("{\"city\":\"PARIS\",\"days\":3}"));
    assertEquals(List.of(), errors("{\"city\":\"ROME\",\"days\":7,\"tags\":[\"a\",\"bcd\"],"
        + "\"next\":{\"city\":\"PARIS\",\"days\":1,\"next\":null}}"));
  }

  @Test
  void violationsAreFound() {
    for (String bad : List.of("{\"city\":\"LYON\",\"days\":3}", "{\"city\":\"PARIS\"}",
        "{\"city\":\"PARIS\",\"days\":8}", "{\"city\":\"PARIS\",\"days\":2.5}",
        "{\"city\":\"PARIS\",\"days\":2,\"extra\":1}", "{\"city\":\"PARIS\",\"days\":2,\"tags\":[\"abcd\"]}",
        "{\"city\":\"PARIS\",\"days\":2,\"tags\":[\"a\",\"b\",\"c\"]}",
        "{\"city\":\"PARIS\",\"days\":2,\"next\":{\"city\":\"PARIS\"}}", "[1]")) {
      assertFalse(errors(bad).isEmpty(), "refused: " + bad);
    }
  }

  record Trip(String city, int days, java.util.Optional<Trip> next) {}

  @Test
  void jsonSchemasOutputAcceptsAndRefusesAsExpected() {
    Map<String, Object> schema = Json.parseObject(JsonSchemas.of(Trip.class));
    assertEquals(List.of(), SchemaCheck.errors(Json.parse(
        "{\"city\":\"x\",\"days\":1,\"next\":{\"city\":\"y\",\"days\":2,\"next\":null}}"), schema));
    assertFalse(SchemaCheck.errors(Json.parse("{\"city\":\"x\",\"days\":\"1\"}"), schema).isEmpty());
    assertFalse(SchemaCheck.errors(Json.parse("{\"city\":\"x\",\"days\":1,\"z\":0}"), schema).isEmpty());
  }
}
