package dev.llama2;

import com.sun.jna.Callback;
import com.sun.jna.CallbackThreadInitializer;
import com.sun.jna.Library;
import com.sun.jna.Native;
import com.sun.jna.Pointer;
import com.sun.jna.ptr.IntByReference;
import java.nio.charset.StandardCharsets;

/**
 * JNA binding of {@code libllama2shim.so} (java-bridge/native/llama2_shim.h), loaded on first use.
 *
 * <p>Every {@code const char*} goes in as NUL-terminated UTF-8 {@code byte[]} and every string comes
 * back as bytes decoded here with UTF-8, so the JVM's default charset and {@code jna.encoding} never
 * matter.
 */
final class NativeShim {
  static final int ABI_VERSION = 2;  // LLAMA2_SHIM_ABI_VERSION
  static final String LIBRARY = "llama2shim";
  /** System property with an absolute path to the library; wins over jna.library.path. */
  static final String PATH_PROPERTY = "llama2.shim.path";

  private NativeShim() {}

  interface TokenFn extends Callback {
    /** {@code logprobJson}: NULL unless the request asked for logprobs (llama2_shim.h). */
    void invoke(Pointer user, Pointer text, int len, int index, int tokenId, Pointer logprobJson,
                int logprobLen);
  }

  interface FinalFn extends Callback {
    void invoke(Pointer user, Pointer eventJson, int len);
  }

  interface Lib extends Library {
    int llama2_shim_abi_version();

    Pointer llama2_shim_connect(byte[] socketPath, int timeoutMs);

    void llama2_shim_shutdown(Pointer h);

    void llama2_shim_close(Pointer h);

    int llama2_shim_generate_async(Pointer h, byte[] requestJson, TokenFn onToken, FinalFn onFinal,
                                   Pointer user, byte[] idOut, int idOutSize);

    Pointer llama2_shim_generate(Pointer h, byte[] requestJson, int timeoutMs, TokenFn onToken,
                                 Pointer user, IntByReference lenOut);

    int llama2_shim_cancel(Pointer h, byte[] id);

    Pointer llama2_shim_health(Pointer h, int timeoutMs, IntByReference lenOut);

    Pointer llama2_shim_stats(Pointer h, int timeoutMs, IntByReference lenOut);

    int llama2_shim_connected(Pointer h);

    void llama2_shim_free(Pointer s);

    Pointer llama2_shim_last_error();
  }

  private static final class Holder {
    static final Lib LIB = load();
  }

  /** The library; throws {@link Llama2Exception} (code {@code library_not_found}) when missing. */
  static Lib lib() {
    try {
      return Holder.LIB;
    } catch (ExceptionInInitializerError e) {
      throw (Llama2Exception) e.getCause();
    } catch (NoClassDefFoundError e) {
      // Holder failed once already; the JVM does not rerun a failed initializer.
      throw new Llama2Exception("library_not_found", "lib" + LIBRARY + ".so failed to load earlier "
          + "in this JVM (see the first error); " + hint(), null, e);
    }
  }

  private static String hint() {
    return "set -Djna.library.path=DIR to the directory holding lib" + LIBRARY + ".so (CMake "
        + "builds it in BUILD/java-bridge) or -D" + PATH_PROPERTY + "=/abs/path/lib" + LIBRARY
        + ".so; jna.library.path is " + quoteProp("jna.library.path") + ", " + PATH_PROPERTY
        + " is " + quoteProp(PATH_PROPERTY);
  }

  private static String quoteProp(String name) {
    String v = System.getProperty(name);
    return v == null ? "not set" : "'" + v + "'";
  }

  private static Lib load() {
    String path = System.getProperty(PATH_PROPERTY);
    Lib lib;
    try {
      lib = Native.load(path != null ? path : LIBRARY, Lib.class);
    } catch (UnsatisfiedLinkError e) {
      throw new Llama2Exception("library_not_found",
          "cannot load lib" + LIBRARY + ".so: " + e.getMessage() + "; " + hint(), null, e);
    }
    int v = lib.llama2_shim_abi_version();
    if (v != ABI_VERSION) {
      throw new Llama2Exception("library_not_found", "lib" + LIBRARY + ".so has ABI version " + v
          + " but this Java library needs " + ABI_VERSION + " (rebuild both from one tree)", null);
    }
    return lib;
  }

  /** This thread's last local failure of the shim. */
  static String lastError() {
    Pointer p = lib().llama2_shim_last_error();
    if (p == null) return "";
    long n = p.indexOf(0, (byte) 0);
    return new String(p.getByteArray(0, (int) n), StandardCharsets.UTF_8);
  }

  /** Reads and frees a string returned by the shim ({@code len} bytes). */
  static String take(Pointer p, int len) {
    try {
      return new String(p.getByteArray(0, len), StandardCharsets.UTF_8);
    } finally {
      lib().llama2_shim_free(p);
    }
  }

  /** Reader threads stay attached to the JVM between callbacks (JNA detaches them at exit). */
  static void keepAttached(Callback cb) {
    Native.setCallbackThreadInitializer(cb,
        new CallbackThreadInitializer(true, false, "llama2-shim-reader"));
  }
}
