package dev.llama2;

import com.sun.jna.Pointer;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.atomic.AtomicLong;

/**
 * Routes the shim's callbacks to the {@link Generation} they belong to.
 *
 * <p>One pair of JNA callback objects serves every generation of every client: they live in static
 * fields, so they are strongly reachable for as long as native code may call them (a callback
 * object that the garbage collector reclaimed while its native trampoline is still registered
 * would crash the JVM). The native {@code user} pointer carries a key into {@link #LIVE}, which
 * holds each generation, with its listener, until its final event (or its client-side timeout).
 */
final class Calls {
  private Calls() {}

  private static final ConcurrentHashMap<Long, Generation> LIVE = new ConcurrentHashMap<>();
  private static final AtomicLong NEXT_KEY = new AtomicLong();
  private static final byte[] EMPTY = new byte[0];

  /** Client-side deadlines of streamed generations. */
  static final ScheduledThreadPoolExecutor TIMERS = new ScheduledThreadPoolExecutor(1, r -> {
    Thread t = new Thread(r, "llama2-timeouts");
    t.setDaemon(true);
    return t;
  });

  static {
    TIMERS.setRemoveOnCancelPolicy(true);
  }

  static final NativeShim.TokenFn TOKEN = new NativeShim.TokenFn() {
    @Override
    public void invoke(Pointer user, Pointer text, int len, int index, int tokenId,
                       Pointer logprobJson, int logprobLen) {
      Generation g = LIVE.get(Pointer.nativeValue(user));
      if (g == null) return;  // timed out on the client side; late events are dropped
      byte[] bytes = len > 0 ? text.getByteArray(0, len) : EMPTY;
      byte[] logprob = logprobJson != null ? logprobJson.getByteArray(0, logprobLen) : null;
      g.onToken(bytes, index, tokenId, logprob);
    }
  };

  static final NativeShim.FinalFn FINAL = new NativeShim.FinalFn() {
    @Override
    public void invoke(Pointer user, Pointer eventJson, int len) {
      Generation g = LIVE.remove(Pointer.nativeValue(user));
      if (g == null) return;
      g.onFinal(eventJson.getByteArray(0, len));
    }
  };

  static {
    NativeShim.keepAttached(TOKEN);
    NativeShim.keepAttached(FINAL);
  }

  static long register(Generation g) {
    long key = NEXT_KEY.incrementAndGet();
    LIVE.put(key, g);
    return key;
  }

  /** True when this call removed it (and so owns its completion). */
  static boolean unregister(long key, Generation g) {
    return LIVE.remove(key, g);
  }

  /** Generations whose final event has not come yet (all clients). */
  static int live() {
    return LIVE.size();
  }
}
