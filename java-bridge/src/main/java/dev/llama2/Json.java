package dev.llama2;

import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The little JSON this library needs, without a dependency: {@link #parse} reads the engine's
 * events (objects, arrays, strings, numbers, booleans, null) and {@link #quote} writes strings.
 *
 * <p>Parsed values are {@code Map<String, Object>} (insertion-ordered), {@code List<Object>},
 * {@code String}, {@code Long} (integers that fit), {@code BigInteger} (larger integers),
 * {@code Double}, {@code Boolean} or {@code null}.
 * Public because the example server uses it too; not meant as a general JSON library.
 */
public final class Json {
  private static final int MAX_DEPTH = 64;  // the engine's events nest 3 deep

  private final String s;
  private int pos;

  private Json(String s) {
    this.s = s;
  }

  /** Parses one JSON value; throws {@link IllegalArgumentException} naming the offset. */
  public static Object parse(String text) {
    Json p = new Json(text);
    p.skipSpace();
    Object v = p.value(0);
    p.skipSpace();
    if (p.pos != text.length()) throw p.error("trailing characters");
    return v;
  }

  /** Parses a JSON object. */
  @SuppressWarnings("unchecked")
  public static Map<String, Object> parseObject(String text) {
    Object v = parse(text);
    if (!(v instanceof Map)) throw new IllegalArgumentException("not a JSON object: " + abbreviate(text));
    return (Map<String, Object>) v;
  }

  /** {@code s} as a JSON string literal; control characters, quotes and backslashes escaped. */
  public static String quote(String str) {
    StringBuilder b = new StringBuilder(str.length() + 2);
    quoteTo(b, str);
    return b.toString();
  }

  static void quoteTo(StringBuilder b, String str) {
    b.append('"');
    for (int i = 0; i < str.length(); i++) {
      char c = str.charAt(i);
      switch (c) {
        case '"': b.append("\\\""); break;
        case '\\': b.append("\\\\"); break;
        case '\n': b.append("\\n"); break;
        case '\r': b.append("\\r"); break;
        case '\t': b.append("\\t"); break;
        default:
          // U+2028/2029 are valid JSON but break JavaScript consumers of SSE; escape them too.
          if (c < 0x20 || c == 0x2028 || c == 0x2029) {
            b.append(String.format("\\u%04x", (int) c));
          } else {
            b.append(c);
          }
      }
    }
    b.append('"');
  }

  /**
   * {@code v} as JSON text: a {@code Map} (String keys) as an object, a {@code List} as an array,
   * {@code String}, finite {@code Number}, {@code Boolean}, {@code null}, or {@link Raw} JSON text.
   */
  static String write(Object v) {
    StringBuilder b = new StringBuilder();
    writeTo(b, v);
    return b.toString();
  }

  /** JSON text that {@link #write} copies as it is (already checked by whoever made it). */
  record Raw(String json) {}

  static void writeTo(StringBuilder b, Object v) {
    if (v == null) {
      b.append("null");
    } else if (v instanceof String) {
      quoteTo(b, (String) v);
    } else if (v instanceof Raw) {
      b.append(((Raw) v).json());
    } else if (v instanceof Boolean || v instanceof Long || v instanceof Integer) {
      b.append(v);
    } else if (v instanceof Number) {
      double d = ((Number) v).doubleValue();
      if (!Double.isFinite(d)) throw new IllegalArgumentException("JSON has no " + d);
      b.append(d);
    } else if (v instanceof Map) {
      b.append('{');
      boolean first = true;
      for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
        if (!first) b.append(',');
        first = false;
        quoteTo(b, (String) e.getKey());
        b.append(':');
        writeTo(b, e.getValue());
      }
      b.append('}');
    } else if (v instanceof List) {
      b.append('[');
      boolean first = true;
      for (Object e : (List<?>) v) {
        if (!first) b.append(',');
        first = false;
        writeTo(b, e);
      }
      b.append(']');
    } else {
      throw new IllegalArgumentException("no JSON form for " + v.getClass().getName());
    }
  }

  static String abbreviate(String text) {
    return text.length() <= 200 ? text : text.substring(0, 200) + "...";
  }

  private IllegalArgumentException error(String what) {
    return new IllegalArgumentException("invalid JSON at offset " + pos + ": " + what + " in "
        + abbreviate(s));
  }

  private void skipSpace() {
    while (pos < s.length()) {
      char c = s.charAt(pos);
      if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
      pos++;
    }
  }

  private Object value(int depth) {
    if (depth > MAX_DEPTH) throw error("nesting deeper than " + MAX_DEPTH);
    if (pos >= s.length()) throw error("unexpected end");
    char c = s.charAt(pos);
    switch (c) {
      case '{': return object(depth);
      case '[': return array(depth);
      case '"': return string();
      case 't': return literal("true", Boolean.TRUE);
      case 'f': return literal("false", Boolean.FALSE);
      case 'n': return literal("null", null);
      default:
        if (c == '-' || (c >= '0' && c <= '9')) return number();
        throw error("unexpected character '" + c + "'");
    }
  }

  private Object literal(String word, Object v) {
    if (!s.startsWith(word, pos)) throw error("expected " + word);
    pos += word.length();
    return v;
  }

  private Map<String, Object> object(int depth) {
    Map<String, Object> m = new LinkedHashMap<>();
    pos++;  // {
    skipSpace();
    if (pos < s.length() && s.charAt(pos) == '}') {
      pos++;
      return m;
    }
    for (;;) {
      skipSpace();
      if (pos >= s.length() || s.charAt(pos) != '"') throw error("expected a key");
      String key = string();
      skipSpace();
      expect(':');
      skipSpace();
      m.put(key, value(depth + 1));
      skipSpace();
      if (pos < s.length() && s.charAt(pos) == ',') {
        pos++;
        continue;
      }
      expect('}');
      return m;
    }
  }

  private List<Object> array(int depth) {
    List<Object> l = new ArrayList<>();
    pos++;  // [
    skipSpace();
    if (pos < s.length() && s.charAt(pos) == ']') {
      pos++;
      return l;
    }
    for (;;) {
      skipSpace();
      l.add(value(depth + 1));
      skipSpace();
      if (pos < s.length() && s.charAt(pos) == ',') {
        pos++;
        continue;
      }
      expect(']');
      return l;
    }
  }

  private void expect(char c) {
    if (pos >= s.length() || s.charAt(pos) != c) throw error("expected '" + c + "'");
    pos++;
  }

  private String string() {
    pos++;  // opening quote
    StringBuilder b = new StringBuilder();
    while (pos < s.length()) {
      char c = s.charAt(pos++);
      if (c == '"') return b.toString();
      if (c != '\\') {
        b.append(c);
        continue;
      }
      if (pos >= s.length()) break;
      char e = s.charAt(pos++);
      switch (e) {
        case '"': b.append('"'); break;
        case '\\': b.append('\\'); break;
        case '/': b.append('/'); break;
        case 'b': b.append('\b'); break;
        case 'f': b.append('\f'); break;
        case 'n': b.append('\n'); break;
        case 'r': b.append('\r'); break;
        case 't': b.append('\t'); break;
        case 'u':
          if (pos + 4 > s.length()) throw error("short \\u escape");
          try {
            b.append((char) Integer.parseInt(s.substring(pos, pos + 4), 16));
          } catch (NumberFormatException ex) {
            throw error("bad \\u escape");
          }
          pos += 4;
          break;
        default: throw error("bad escape \\" + e);
      }
    }
    throw error("unterminated string");
  }

  private Object number() {
    int start = pos;
    boolean integral = true;
    while (pos < s.length()) {
      char c = s.charAt(pos);
      if (c == '.' || c == 'e' || c == 'E') {
        integral = false;
      } else if (!(c == '-' || c == '+' || (c >= '0' && c <= '9'))) {
        break;
      }
      pos++;
    }
    String t = s.substring(start, pos);
    try {
      if (integral) {
        try {
          return Long.parseLong(t);
        } catch (NumberFormatException tooBig) {
          // e.g. a 64-bit seed above Long.MAX_VALUE: longValue() keeps its unsigned bits.
          return new java.math.BigInteger(t);
        }
      }
      return Double.parseDouble(t);
    } catch (NumberFormatException ex) {
      throw error("bad number " + t);
    }
  }

  // ---- typed getters over parsed objects --------------------------------------------------------

  static String str(Map<String, Object> m, String key, String dflt) {
    Object v = m.get(key);
    return v instanceof String ? (String) v : dflt;
  }

  static long num(Map<String, Object> m, String key, long dflt) {
    Object v = m.get(key);
    return v instanceof Number ? ((Number) v).longValue() : dflt;
  }

  static double dbl(Map<String, Object> m, String key, double dflt) {
    Object v = m.get(key);
    return v instanceof Number ? ((Number) v).doubleValue() : dflt;
  }

  @SuppressWarnings("unchecked")
  static Map<String, Object> obj(Map<String, Object> m, String key) {
    Object v = m.get(key);
    return v instanceof Map ? (Map<String, Object>) v : Collections.emptyMap();
  }
}
