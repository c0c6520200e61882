package dev.llama2;

import com.sun.jna.Pointer;
import com.sun.jna.ptr.IntByReference;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.Executor;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A connection to {@code llama2 serve} (its Unix socket) through {@code libllama2shim.so}.
 *
 * <pre>{@code
 * try (Llama2Client client = Llama2Client.connect("/run/llama2/llama2.sock")) {
 *   Completion c = client.generate("Hello", GenerationParams.builder().temperature(0).build());
 *   System.out.println(c.text() + " (" + c.completionTokens() + " tokens, " + c.finishReason() + ")");
 * }
 * }</pre>
 *
 * <p>Thread-safe: one client serves many threads at once (their generations are multiplexed on one
 * connection, as the protocol allows), and is meant to be shared, e.g. one per application. Token
 * callbacks run on the connection's reader thread (see {@link TokenListener}).
 *
 * <p>Failures are unchecked {@link Llama2Exception}s typed by the protocol's error code. Once the
 * connection is lost (server stopped or killed) every call fails with
 * {@link ServerUnavailableException}; connect a new client. The native library is found through
 * {@code -Djna.library.path=DIR} (or {@code -Dllama2.shim.path=/abs/libllama2shim.so}).
 */
public final class Llama2Client implements AutoCloseable {
  /** Default wait for the socket connection. */
  public static final Duration DEFAULT_CONNECT_TIMEOUT = Duration.ofSeconds(5);
  /** Default wait for a {@code health} or {@code stats} answer. */
  public static final Duration DEFAULT_QUERY_TIMEOUT = Duration.ofSeconds(5);
  // The per-call timeout travels to the server as timeout_ms, which ends the generation with
  // finish_reason "timeout" (and the partial text). The client's own deadline comes this much later
  // and only matters when the server does not answer at all.
  private static final long CLIENT_GRACE_MS = 1000;
  private static final AtomicLong NEXT_ID = new AtomicLong();
  private static final String ID_PREFIX = "j" + ProcessHandle.current().pid() + "-";

  private final NativeShim.Lib lib;
  private final Pointer handle;
  private final String socketPath;
  // Native calls in progress; close() frees the handle only when none is.
  private final AtomicInteger active = new AtomicInteger();
  // This thread's calls in progress on this client: a close() from inside one of them (e.g. a
  // completion stage that runs synchronously when the connection is already gone) must not wait
  // for itself.
  private final ThreadLocal<int[]> depth = ThreadLocal.withInitial(() -> new int[1]);
  private final AtomicBoolean closed = new AtomicBoolean();
  private final Object drained = new Object();
  private final AtomicBoolean freeOnExit = new AtomicBoolean();

  private Llama2Client(NativeShim.Lib lib, Pointer handle, String socketPath) {
    this.lib = lib;
    this.handle = handle;
    this.socketPath = socketPath;
  }

  /** Connects with {@link #DEFAULT_CONNECT_TIMEOUT}. */
  public static Llama2Client connect(String socketPath) {
    return connect(socketPath, DEFAULT_CONNECT_TIMEOUT);
  }

  /**
   * Connects to the server's Unix socket. Throws {@link ServerUnavailableException} when nobody
   * listens there (or not within the timeout), and {@link Llama2Exception} with code
   * {@code library_not_found} when libllama2shim.so cannot be loaded.
   */
  public static Llama2Client connect(String socketPath, Duration connectTimeout) {
    Objects.requireNonNull(socketPath, "socketPath");
    int ms = positiveMillis(connectTimeout, "connectTimeout");
    NativeShim.Lib lib = NativeShim.lib();
    Pointer h = lib.llama2_shim_connect(Utf8.cString(socketPath), ms);
    if (h == null) throw new ServerUnavailableException(NativeShim.lastError(), null);
    return new Llama2Client(lib, h, socketPath);
  }

  public String socketPath() {
    return socketPath;
  }

  /** Blocking generate with {@link GenerationParams#defaults()}. */
  public Completion generate(String prompt) {
    return generate(prompt, GenerationParams.defaults());
  }

  /**
   * Generates the whole text and returns it with its token count, finish reason and timings. The
   * server sends the text in one piece (no token events). Throws {@link GenerationTimeoutException}
   * when {@code params.timeout()} passes (with the partial text in it), and the typed
   * {@link Llama2Exception} of any other failure. Interruptible: {@link Thread#interrupt()} of the
   * waiting thread cancels the generation on the server (its KV blocks are freed) and throws
   * {@link GenerationInterruptedException}, with the thread's interrupt flag set again.
   */
  public Completion generate(String prompt, GenerationParams params) {
    return complete(promptField(prompt, null), params);
  }

  /**
   * Like {@link #generate(String, GenerationParams)} for a chat dialog, which the server encodes in
   * the Llama-2 chat format. A dialog that breaks the order rule (optional system first, then user
   * and assistant alternating, starting and ending with user) throws
   * {@link InvalidRequestException} naming the rule.
   */
  public Completion chat(List<ChatMessage> messages, GenerationParams params) {
    return complete(messagesField(messages), params);
  }

  /** Streamed {@link #chat}: as {@link #stream(String, GenerationParams, TokenListener)}. */
  public Generation chatStream(List<ChatMessage> messages, GenerationParams params,
      TokenListener listener) {
    Objects.requireNonNull(listener, "listener");
    return start(messagesField(messages), params, listener, true);
  }

  /**
   * The blocking calls: a non-streamed generation whose caller waits for its final event. Waiting
   * in Java rather than in the shim's blocking call lets an interrupt cancel it on the server.
   */
  private Completion complete(String promptField, GenerationParams params) {
    if (Thread.currentThread().isInterrupted()) {
      throw new GenerationInterruptedException(
          "the thread was interrupted before the call; nothing was sent", null, null);
    }
    Generation g = start(promptField, params, null, false);
    try {
      return g.await();  // cancels the generation when interrupted
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new GenerationInterruptedException("interrupted while waiting for '" + g.requestId()
          + "'; the generation was cancelled on the server", g.requestId(), e);
    }
  }

  /**
   * Starts a streamed generation: {@code listener} receives each token on the reader thread (with
   * its {@link TokenLogprob} when {@code params} ask for logprobs: see {@link TokenListener}), and
   * the returned {@link Generation} completes with the {@link Completion} (whose text is the
   * concatenation of the pieces). Returns at once; failures arrive through the Generation.
   */
  public Generation stream(String prompt, GenerationParams params, TokenListener listener) {
    Objects.requireNonNull(listener, "listener");
    return start(promptField(prompt, null), params, listener, true);
  }

  /**
   * The tokens of a new generation as an iterator of text pieces; close it (try-with-resources) to
   * cancel early. See {@link TokenStream}.
   */
  public TokenStream tokens(String prompt, GenerationParams params) {
    TokenStream ts = new TokenStream();
    ts.attach(start(promptField(prompt, null), params, ts.listener(), true));
    return ts;
  }

  /**
   * The tokens of a generation as a {@link java.util.concurrent.Flow.Publisher} (see {@link
   * TokenPublisher}: cold, one generation per subscriber, started at its first request; honours
   * back-pressure; {@code cancel()} cancels the generation on the server; typed {@code onError}).
   * Signals run on a shared pool of daemon threads.
   */
  public TokenPublisher publisher(String prompt, GenerationParams params) {
    return publisher(prompt, params, TokenPublisher.SIGNALS);
  }

  /** {@link #publisher(String, GenerationParams)} whose signals run on {@code executor}. */
  public TokenPublisher publisher(String prompt, GenerationParams params, Executor executor) {
    String field = promptField(prompt, null);
    Objects.requireNonNull(params, "params");
    return new TokenPublisher(listener -> start(field, params, listener, true), executor);
  }

  /** {@link #publisher(String, GenerationParams)} for a chat dialog (see {@link #chat}). */
  public TokenPublisher chatPublisher(List<ChatMessage> messages, GenerationParams params) {
    return chatPublisher(messages, params, TokenPublisher.SIGNALS);
  }

  /** {@link #chatPublisher(List, GenerationParams)} whose signals run on {@code executor}. */
  public TokenPublisher chatPublisher(List<ChatMessage> messages, GenerationParams params,
      Executor executor) {
    String field = messagesField(messages);
    Objects.requireNonNull(params, "params");
    return new TokenPublisher(listener -> start(field, params, listener, true), executor);
  }

  /** Sends a generation; {@code listener} null: no token callbacks (a blocking call). */
  private Generation start(String promptField, GenerationParams params, TokenListener listener,
      boolean stream) {
    String id = ID_PREFIX + NEXT_ID.incrementAndGet();
    byte[] request = request(promptField, params, stream, id);
    Generation g = new Generation(this, id, listener);
    long key = Calls.register(g);
    g.registered(key);
    Pointer h;
    try {
      h = enter();
    } catch (Llama2Exception e) {
      Calls.unregister(key, g);
      throw e;
    }
    try {
      // The key travels as the native `user` pointer (never dereferenced by the shim).
      int rc = lib.llama2_shim_generate_async(h, request, Calls.TOKEN, Calls.FINAL,
          new Pointer(key), null, 0);
      if (rc != 0) {
        Calls.unregister(key, g);
        throw new InvalidRequestException(NativeShim.lastError(), id);
      }
    } finally {
      exit();
    }
    if (params.timeout() != null) g.armTimer(params.timeout().toMillis() + CLIENT_GRACE_MS);
    return g;
  }

  /**
   * Asks the server to end generation {@code requestId} of this client ({@link
   * Generation#requestId()}); it then finishes with {@link FinishReason#CANCELLED}. Unknown or
   * finished ids are ignored by the server.
   */
  public void cancel(String requestId) {
    Objects.requireNonNull(requestId, "requestId");
    Pointer h = enter();
    try {
      if (lib.llama2_shim_cancel(h, Utf8.cString(requestId)) != 0) {
        throw new InvalidRequestException(NativeShim.lastError(), requestId);
      }
    } finally {
      exit();
    }
  }

  /** cancel() for internal use: a closed client or a lost connection has nothing to cancel. */
  void cancelQuietly(String requestId) {
    try {
      cancel(requestId);
    } catch (Llama2Exception e) {  // closed or disconnected: the shutdown ended the generation
      Log.LOG.log(System.Logger.Level.DEBUG, "llama2: cancel of '" + requestId + "' not sent", e);
    }
  }

  /**
   * The server's {@code health} answer as JSON, passed through unchanged: {@code status},
   * {@code running}, {@code queued}, {@code kv_blocks_used}, ... (docs/PROTOCOL.md).
   */
  public String healthJson(Duration timeout) {
    int ms = positiveMillis(timeout, "timeout");
    Pointer h = enter();
    String json;
    try {
      IntByReference len = new IntByReference();
      Pointer p = lib.llama2_shim_health(h, ms, len);
      if (p == null) throw new Llama2Exception("internal", NativeShim.lastError(), null);
      json = NativeShim.take(p, len.getValue());
    } finally {
      exit();
    }
    Map<String, Object> ev = Json.parseObject(json);
    if ("error".equals(ev.get("event"))) {
      throw Llama2Exception.fromCode(Json.str(ev, "code", "internal"), Json.str(ev, "message", ""), null);
    }
    return json;
  }

  public String healthJson() {
    return healthJson(DEFAULT_QUERY_TIMEOUT);
  }

  /** {@link #healthJson()} parsed (numbers are Long, strings String). */
  public Map<String, Object> health() {
    return Json.parseObject(healthJson());
  }

  /** The server's metrics in the Prometheus text format. */
  public String stats() {
    Pointer h = enter();
    try {
      IntByReference len = new IntByReference();
      Pointer p = lib.llama2_shim_stats(h, (int) DEFAULT_QUERY_TIMEOUT.toMillis(), len);
      if (p == null) {
        String err = NativeShim.lastError();
        int colon = err.indexOf(": ");
        throw Llama2Exception.fromCode(colon > 0 ? err.substring(0, colon) : "internal",
            colon > 0 ? err.substring(colon + 2) : err, null);
      }
      return NativeShim.take(p, len.getValue());
    } finally {
      exit();
    }
  }

  /** False once the connection is gone (or the client closed). */
  public boolean isConnected() {
    if (closed.get()) return false;
    Pointer h = enter();
    try {
      return lib.llama2_shim_connected(h) == 1;
    } finally {
      exit();
    }
  }

  /**
   * Closes the connection. Generations in flight end with {@link ServerUnavailableException} and
   * blocking calls in progress on other threads return with it; later calls throw it. Waits for
   * those calls to leave the native library (a {@code health} call in progress: up to its timeout),
   * then frees it. Idempotent. Not from a {@link TokenListener}.
   */
  @Override
  public void close() {
    if (!closed.compareAndSet(false, true)) return;
    lib.llama2_shim_shutdown(handle);
    boolean interrupted = false;
    int own = depth.get()[0];
    synchronized (drained) {
      while (active.get() > own) {
        try {
          drained.wait();
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    }
    if (own == 0) {
      lib.llama2_shim_close(handle);
    } else {
      freeOnExit.set(true);  // the outermost call of this thread frees it on its way out
    }
    if (interrupted) Thread.currentThread().interrupt();
  }

  // ---- internals --------------------------------------------------------------------------------

  private Pointer enter() {
    active.incrementAndGet();
    depth.get()[0]++;
    if (closed.get()) {
      exit();
      throw new ServerUnavailableException("llama2 client for '" + socketPath + "' is closed", null);
    }
    return handle;
  }

  private void exit() {
    depth.get()[0]--;
    int left = active.decrementAndGet();
    if (closed.get()) {
      synchronized (drained) {
        drained.notifyAll();
      }
      if (left == 0 && freeOnExit.compareAndSet(true, false)) {
        lib.llama2_shim_close(handle);
      }
    }
  }

  /** {@code "prompt":"..."}, the text checked for unpaired surrogates. */
  private static String promptField(String prompt, String id) {
    Objects.requireNonNull(prompt, "prompt");
    if (!Utf8.isWellFormed(prompt)) {
      throw new InvalidRequestException("prompt is not valid Unicode (unpaired surrogate)", id);
    }
    StringBuilder b = new StringBuilder(prompt.length() + 16);
    b.append("\"prompt\":");
    Json.quoteTo(b, prompt);
    return b.toString();
  }

  /** {@code "messages":[{"role":..., "content":...}, ...]}; the order rule is the server's. */
  private static String messagesField(List<ChatMessage> messages) {
    Objects.requireNonNull(messages, "messages");
    StringBuilder b = new StringBuilder(256);
    b.append("\"messages\":[");
    for (int i = 0; i < messages.size(); ++i) {
      ChatMessage m = Objects.requireNonNull(messages.get(i), "messages[" + i + "]");
      if (!Utf8.isWellFormed(m.content())) {
        throw new InvalidRequestException(
            "messages[" + i + "].content is not valid Unicode (unpaired surrogate)", null);
      }
      if (i > 0) b.append(',');
      m.appendJson(b);
    }
    return b.append(']').toString();
  }

  private static byte[] request(String promptField, GenerationParams params, boolean stream,
      String id) {
    Objects.requireNonNull(params, "params");
    if (!params.tools().isEmpty() && !promptField.startsWith("\"messages\"")) {
      throw new IllegalArgumentException("tools need a chat dialog: use chat, chatStream or "
          + "chatPublisher (OpenAI's tools belong to chat completions)");
    }
    StringBuilder b = new StringBuilder(promptField.length() + 256);
    b.append('{');
    if (id != null) b.append("\"id\":").append(Json.quote(id)).append(',');
    b.append(promptField).append(',');
    params.appendJson(b);
    b.append(",\"stream\":").append(stream).append('}');
    return Utf8.cString(b.toString());
  }

  private static int positiveMillis(Duration d, String what) {
    Objects.requireNonNull(d, what);
    long ms = d.toMillis();
    if (ms < 1 || ms > Integer.MAX_VALUE) {
      throw new IllegalArgumentException(what + " must be in [1 ms, " + Integer.MAX_VALUE
          + " ms] (got " + d + ")");
    }
    return (int) ms;
  }
}
