package dev.llama2;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * A small JSON Schema validator for the replay tests, written here from the JSON Schema
 * specification (draft 2020-12) and independent of the server's C++ compiler: type (string or
 * array), properties, required, additionalProperties (false or a schema), enum, const, items,
 * minItems/maxItems, minLength/maxLength, minimum/maximum, anyOf/oneOf, $ref ("#" and
 * "#/$defs/Name", "#/definitions/Name"). Annotations are ignored. {@link #errors} lists every
 * violation with its JSON path; empty means valid.
 */
final class SchemaCheck {
  private final Map<String, Object> root;
  private final List<String> errors = new ArrayList<>();

  private SchemaCheck(Map<String, Object> root) {
    this.root = root;
  }

  static List<String> errors(Object value, Map<String, Object> schema) {
    SchemaCheck c = new SchemaCheck(schema);
    c.check(value, schema, "$");
    return c.errors;
  }

  @SuppressWarnings("unchecked")
  private Map<String, Object> resolve(String ref) {
    if (ref.equals("#")) return root;
    String[] parts = ref.substring(2).split("/");
    Object node = root;
    for (String p : parts) node = ((Map<String, Object>) node).get(p);
    if (!(node instanceof Map)) throw new IllegalArgumentException("bad $ref " + ref);
    return (Map<String, Object>) node;
  }

  @SuppressWarnings("unchecked")
  private void check(Object v, Object schemaObj, String at) {
    if (schemaObj instanceof Boolean) {
      if (!(Boolean) schemaObj) errors.add(at + ": schema false");
      return;
    }
    Map<String, Object> s = (Map<String, Object>) schemaObj;
    if (s.get("$ref") instanceof String) {
      check(v, resolve((String) s.get("$ref")), at);
      return;
    }
    for (String key : List.of("anyOf", "oneOf")) {
      if (!(s.get(key) instanceof List)) continue;
      int ok = 0;
      for (Object branch : (List<Object>) s.get(key)) {
        SchemaCheck sub = new SchemaCheck(root);  // $refs inside the branch refer to the root
        sub.check(v, branch, at);
        if (sub.errors.isEmpty()) ok++;
      }
      if (ok == 0 || (key.equals("oneOf") && ok > 1)) errors.add(at + ": " + ok + " " + key + " branches match");
    }
    if (s.containsKey("const") && !equal(s.get("const"), v)) errors.add(at + ": not the const");
    if (s.get("enum") instanceof List && ((List<Object>) s.get("enum")).stream().noneMatch(e -> equal(e, v))) {
      errors.add(at + ": " + v + " not in enum " + s.get("enum"));
    }
    Object type = s.get("type");
    if (type != null) {
      List<Object> types = type instanceof List ? (List<Object>) type : List.of(type);
      if (types.stream().noneMatch(t -> hasType(v, (String) t))) {
        errors.add(at + ": " + Json.write(v) + " is not of type " + type);
        return;
      }
    }
    if (v instanceof String) strings((String) v, s, at);
    if (v instanceof Number) numbers(((Number) v).doubleValue(), s, at);
    if (v instanceof List) arrays((List<Object>) v, s, at);
    if (v instanceof Map) objects((Map<String, Object>) v, s, at);
  }

  private void strings(String v, Map<String, Object> s, String at) {
    int n = v.codePointCount(0, v.length());
    if (s.get("minLength") instanceof Number && n < ((Number) s.get("minLength")).intValue()) errors.add(at + ": too short");
    if (s.get("maxLength") instanceof Number && n > ((Number) s.get("maxLength")).intValue()) errors.add(at + ": too long");
  }

  private void numbers(double v, Map<String, Object> s, String at) {
    if (s.get("minimum") instanceof Number && v < ((Number) s.get("minimum")).doubleValue()) errors.add(at + ": below minimum");
    if (s.get("maximum") instanceof Number && v > ((Number) s.get("maximum")).doubleValue()) errors.add(at + ": above maximum");
  }

  private void arrays(List<Object> v, Map<String, Object> s, String at) {
    if (s.get("minItems") instanceof Number && v.size() < ((Number) s.get("minItems")).intValue()) errors.add(at + ": too few items");
    if (s.get("maxItems") instanceof Number && v.size() > ((Number) s.get("maxItems")).intValue()) errors.add(at + ": too many items");
    if (s.containsKey("items")) {
      for (int i = 0; i < v.size(); i++) check(v.get(i), s.get("items"), at + "[" + i + "]");
    }
  }

  @SuppressWarnings("unchecked")
  private void objects(Map<String, Object> v, Map<String, Object> s, String at) {
    Map<String, Object> props = s.get("properties") instanceof Map ? (Map<String, Object>) s.get("properties") : Map.of();
    if (s.get("required") instanceof List) {
      for (Object r : (List<Object>) s.get("required")) {
        if (!v.containsKey(r)) errors.add(at + ": missing required " + r);
      }
    }
    for (Map.Entry<String, Object> e : v.entrySet()) {
      String p = at + "." + e.getKey();
      if (props.containsKey(e.getKey())) {
        check(e.getValue(), props.get(e.getKey()), p);
      } else if (s.containsKey("additionalProperties")) {
        check(e.getValue(), s.get("additionalProperties"), p);
      }
    }
  }

  private static boolean hasType(Object v, String t) {
    switch (t) {
      case "null": return v == null;
      case "boolean": return v instanceof Boolean;
      case "string": return v instanceof String;
      case "array": return v instanceof List;
      case "object": return v instanceof Map;
      case "number": return v instanceof Number;
      case "integer": return v instanceof Long || v instanceof java.math.BigInteger
          || (v instanceof Double && (Double) v == Math.rint((Double) v));
      default: throw new IllegalArgumentException("unknown type " + t);
    }
  }

  private static boolean equal(Object a, Object b) {
    if (a instanceof Number && b instanceof Number) {
      return ((Number) a).doubleValue() == ((Number) b).doubleValue();
    }
    return java.util.Objects.equals(a, b);
  }
}
