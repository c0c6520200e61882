package dev.llama2;

import java.lang.annotation.Annotation;
import java.lang.reflect.AnnotatedElement;
import java.lang.reflect.AnnotatedType;
import java.lang.reflect.Field;
import java.lang.reflect.GenericArrayType;
import java.lang.reflect.Modifier;
import java.lang.reflect.ParameterizedType;
import java.lang.reflect.RecordComponent;
import java.lang.reflect.Type;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;

/**
 * A JSON Schema for a Java record or POJO class, by reflection, with no dependency: for
 * {@link ResponseFormat#jsonSchema(Class)} and {@link Tool#function(String, String, Class)}.
 *
 * <pre>{@code
 * record City(String name, int population, Optional<String> country, List<String> districts) {}
 * JsonSchemas.of(City.class)
 * // {"type":"object","properties":{"name":{"type":"string"},"population":{"type":"integer"},
 * //  "country":{"type":["string","null"]},"districts":{"type":"array","items":{"type":"string"}}},
 * //  "required":["name","population","districts"],"additionalProperties":false}
 * }</pre>
 *
 * <p>Properties: a record's components, in order; a POJO's non-static, non-transient fields
 * (superclass fields first). Types: {@code String}, {@code char} -> string; {@code byte},
 * {@code short}, {@code int}, {@code long} (boxed too), {@code BigInteger} -> integer;
 * {@code float}, {@code double} (boxed too), {@code BigDecimal} -> number; {@code boolean} ->
 * boolean; an enum -> its constants' names; {@code List<T>}, {@code Set<T>}, any
 * {@code Collection<T>} and {@code T[]} -> array of T; a nested record or POJO -> an object,
 * defined once under {@code $defs} and referenced ({@code "$ref": "#"} for the root class), so
 * recursive types work.
 *
 * <p>Nullable: {@code Optional<T>} and a component, field or type use annotated with any
 * annotation named {@code Nullable} that is kept at run time (JSpecify, Jakarta, {@code
 * javax.annotation}; JetBrains' is not) allow {@code null} too, as a type array ({@code ["string",
 * "null"]}) or an {@code anyOf} with {@code {"type": "null"}}. Every other property is in
 * {@code required}; objects have {@code "additionalProperties": false}. Anything else ({@code
 * Object}, {@code Map}, interfaces, type variables) throws {@link IllegalArgumentException} naming
 * the property path and its type.
 */
public final class JsonSchemas {
  private final Class<?> root;
  private final Map<Class<?>, String> names = new LinkedHashMap<>();
  private final Map<String, Object> defs = new LinkedHashMap<>();

  private JsonSchemas(Class<?> root) {
    this.root = root;
  }

  /** The JSON Schema of {@code type} (a record or POJO class), as JSON text. */
  public static String of(Class<?> type) {
    return Json.write(schema(type));
  }

  /** The schema as a tree of Maps and Lists (see {@link Json}). */
  static Map<String, Object> schema(Class<?> type) {
    if (!isObjectType(type)) {
      throw new IllegalArgumentException("JsonSchemas.of needs a record or POJO class (got "
          + type.getTypeName() + ")");
    }
    JsonSchemas s = new JsonSchemas(type);
    Map<String, Object> schema = s.object(type, type.getSimpleName());
    if (!s.defs.isEmpty()) schema.put("$defs", s.defs);
    return schema;
  }

  private static boolean isObjectType(Class<?> c) {
    return !c.isPrimitive() && !c.isArray() && !c.isEnum() && !c.isInterface()
        && !Modifier.isAbstract(c.getModifiers()) && !c.getName().startsWith("java.");
  }

  private Map<String, Object> object(Class<?> c, String path) {
    Map<String, Object> properties = new LinkedHashMap<>();
    List<Object> required = new ArrayList<>();
    for (Property p : properties(c)) {
      String at = path + "." + p.name;
      Object s = p.nullable ? nullable(type(p.type, at)) : type(p.type, at);
      properties.put(p.name, s);
      if (!p.nullable) required.add(p.name);
    }
    Map<String, Object> o = new LinkedHashMap<>();
    o.put("type", "object");
    o.put("properties", properties);
    o.put("required", required);
    o.put("additionalProperties", false);
    return o;
  }

  private record Property(String name, Type type, boolean nullable) {}

  private static List<Property> properties(Class<?> c) {
    List<Property> out = new ArrayList<>();
    if (c.isRecord()) {
      for (RecordComponent rc : c.getRecordComponents()) {
        out.add(new Property(rc.getName(), rc.getGenericType(),
            nullable(rc.getGenericType(), rc, rc.getAnnotatedType())));
      }
      return out;
    }
    List<Class<?>> chain = new ArrayList<>();
    for (Class<?> k = c; k != null && k != Object.class; k = k.getSuperclass()) chain.add(0, k);
    for (Class<?> k : chain) {
      for (Field f : k.getDeclaredFields()) {
        int m = f.getModifiers();
        if (Modifier.isStatic(m) || Modifier.isTransient(m) || f.isSynthetic()) continue;
        out.add(new Property(f.getName(), f.getGenericType(),
            nullable(f.getGenericType(), f, f.getAnnotatedType())));
      }
    }
    return out;
  }

  private static boolean nullable(Type t, AnnotatedElement element, AnnotatedType use) {
    if (t instanceof Class && ((Class<?>) t).isPrimitive()) return false;
    return rawClass(t) == Optional.class || hasNullable(element.getAnnotations())
        || hasNullable(use.getAnnotations());
  }

  private static boolean hasNullable(Annotation[] annotations) {
    for (Annotation a : annotations) {
      if (a.annotationType().getSimpleName().equals("Nullable")) return true;
    }
    return false;
  }

  private static Class<?> rawClass(Type t) {
    if (t instanceof Class) return (Class<?>) t;
    if (t instanceof ParameterizedType) return (Class<?>) ((ParameterizedType) t).getRawType();
    return null;
  }

  private static final Set<Class<?>> INTEGERS = Set.of(byte.class, short.class, int.class,
      long.class, Byte.class, Short.class, Integer.class, Long.class, BigInteger.class);
  private static final Set<Class<?>> NUMBERS =
      Set.of(float.class, double.class, Float.class, Double.class, BigDecimal.class);

  /** The schema of a value of type {@code t} found at {@code path} (for messages). */
  private Map<String, Object> type(Type t, String path) {
    if (t instanceof ParameterizedType) {
      ParameterizedType p = (ParameterizedType) t;
      Class<?> raw = (Class<?>) p.getRawType();
      Type arg = p.getActualTypeArguments()[0];
      if (raw == Optional.class) return type(arg, path);  // nullable() adds the null
      if (Collection.class.isAssignableFrom(raw)) return array(type(arg, path + "[]"));
      throw unsupported(t, path);
    }
    if (t instanceof GenericArrayType) {
      return array(type(((GenericArrayType) t).getGenericComponentType(), path + "[]"));
    }
    if (!(t instanceof Class)) throw unsupported(t, path);
    Class<?> c = (Class<?>) t;
    if (c == String.class || c == char.class || c == Character.class) return scalar("string");
    if (INTEGERS.contains(c)) return scalar("integer");
    if (NUMBERS.contains(c)) return scalar("number");
    if (c == boolean.class || c == Boolean.class) return scalar("boolean");
    if (c.isEnum()) {
      Map<String, Object> e = scalar("string");
      List<Object> values = new ArrayList<>();
      for (Object k : c.getEnumConstants()) values.add(((Enum<?>) k).name());
      e.put("enum", values);
      return e;
    }
    if (c.isArray()) return array(type(c.getComponentType(), path + "[]"));
    if (isObjectType(c)) return reference(c, path);
    throw unsupported(t, path);
  }

  private Map<String, Object> reference(Class<?> c, String path) {
    Map<String, Object> ref = new LinkedHashMap<>();
    if (c == root) {
      ref.put("$ref", "#");
      return ref;
    }
    String name = names.get(c);
    if (name == null) {
      name = c.getSimpleName();
      for (int i = 2; defs.containsKey(name); i++) name = c.getSimpleName() + i;
      names.put(c, name);
      defs.put(name, Boolean.TRUE);  // reserved before recursing: a cycle finds the name
      defs.put(name, object(c, path));
    }
    ref.put("$ref", "#/$defs/" + name);
    return ref;
  }

  private static Map<String, Object> scalar(String type) {
    Map<String, Object> s = new LinkedHashMap<>();
    s.put("type", type);
    return s;
  }

  private static Map<String, Object> array(Map<String, Object> items) {
    Map<String, Object> s = scalar("array");
    s.put("items", items);
    return s;
  }

  /** {@code s} or null: a type array where {@code s} is a plain type, else an anyOf. */
  private static Object nullable(Map<String, Object> s) {
    Object type = s.get("type");
    boolean plain = type instanceof String && !type.equals("array") && !type.equals("object");
    if (plain) {
      Map<String, Object> n = new LinkedHashMap<>(s);
      n.put("type", List.of(type, "null"));
      if (n.get("enum") instanceof List) {
        List<Object> values = new ArrayList<>((List<?>) n.get("enum"));
        values.add(null);
        n.put("enum", values);
      }
      return n;
    }
    Map<String, Object> n = new LinkedHashMap<>();
    n.put("anyOf", List.of(s, scalar("null")));
    return n;
  }

  private static IllegalArgumentException unsupported(Type t, String path) {
    return new IllegalArgumentException("JsonSchemas: " + path + " has type " + t.getTypeName()
        + ", which has no JSON Schema here (supported: String, char, boxed or primitive numbers,"
        + " BigInteger, BigDecimal, boolean, enums, Optional, Collection<T>, arrays, records and"
        + " POJOs)");
  }
}
