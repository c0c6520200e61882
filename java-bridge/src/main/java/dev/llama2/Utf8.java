package dev.llama2;

import java.nio.charset.StandardCharsets;

/** UTF-8 at the native boundary: always explicit, never the platform default charset. */
final class Utf8 {
  private Utf8() {}

  /** True when {@code s} has no unpaired surrogate (so it encodes to UTF-8 without loss). */
  static boolean isWellFormed(String s) {
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      if (Character.isHighSurrogate(c)) {
        if (i + 1 >= s.length() || !Character.isLowSurrogate(s.charAt(i + 1))) return false;
        i++;
      } else if (Character.isLowSurrogate(c)) {
        return false;
      }
    }
    return true;
  }

  /** NUL-terminated UTF-8 bytes for a {@code const char*} parameter. */
  static byte[] cString(String s) {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    byte[] out = new byte[b.length + 1];
    System.arraycopy(b, 0, out, 0, b.length);
    return out;
  }

  static String decode(byte[] bytes) {
    return new String(bytes, StandardCharsets.UTF_8);
  }
}
