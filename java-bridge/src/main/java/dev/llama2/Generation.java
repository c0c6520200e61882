package dev.llama2;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * A streamed generation in flight ({@link Llama2Client#stream}): its id, a way to cancel it, and its
 * outcome. The listener is called for each token until the generation ends; then
 * {@link #completion()} completes with the {@link Completion} (also when it was cancelled: finish
 * reason {@link FinishReason#CANCELLED}) or exceptionally with a {@link Llama2Exception}.
 */
public final class Generation {
  private final Llama2Client client;
  private final String id;
  private final TokenListener listener;
  private final CompletableFuture<Completion> future = new CompletableFuture<>();
  // Guarded by `this`: the reader thread appends, the timeout task may end the generation; holding
  // the lock around the listener means no listener call is still running once it has ended.
  private final StringBuilder text = new StringBuilder();
  private final List<Integer> tokenIds = new ArrayList<>();
  private boolean ended;
  private long key;
  private ScheduledFuture<?> timer;

  Generation(Llama2Client client, String id, TokenListener listener) {
    this.client = client;
    this.id = id;
    this.listener = listener;
  }

  /** The protocol id of this request (unique in this process). */
  public String requestId() {
    return id;
  }

  /**
   * Asks the server to stop this generation; it then completes with {@link FinishReason#CANCELLED}
   * (or normally, if it finished first). A no-op once it has ended or the client is closed.
   */
  public void cancel() {
    synchronized (this) {
      if (ended) return;
    }
    client.cancelQuietly(id);
  }

  /** True once the outcome is known. */
  public boolean isDone() {
    return future.isDone();
  }

  /** The outcome, as a future (a copy: completing it does not affect this generation). */
  public CompletableFuture<Completion> completion() {
    return future.copy();
  }

  /**
   * Waits for the outcome. Throws the typed {@link Llama2Exception} of a failure. When interrupted,
   * cancels the generation and throws InterruptedException.
   */
  public Completion await() throws InterruptedException {
    try {
      return future.get();
    } catch (InterruptedException e) {
      cancel();
      throw e;
    } catch (ExecutionException e) {
      throw rethrow(e.getCause());
    }
  }

  static RuntimeException rethrow(Throwable t) {
    if (t instanceof RuntimeException) return (RuntimeException) t;
    if (t instanceof Error) throw (Error) t;
    return new Llama2Exception("internal", String.valueOf(t), null, t);
  }

  // ---- called by Llama2Client and Calls -----------------------------------------------------------

  synchronized void registered(long registryKey) {
    key = registryKey;
  }

  synchronized void armTimer(long delayMs) {
    if (!ended) timer = Calls.TIMERS.schedule(this::clientTimeout, delayMs, TimeUnit.MILLISECONDS);
  }

  /** {@code logprobJson}: the token's logprob fields as JSON, or null when not asked for. */
  synchronized void onToken(byte[] bytes, int index, int tokenId, byte[] logprobJson) {
    if (ended) return;
    String piece = Utf8.decode(bytes);
    text.append(piece);
    tokenIds.add(tokenId);
    if (listener == null) return;
    TokenLogprob logprob = null;
    if (logprobJson != null) {
      try {
        logprob = Events.tokenLogprob(Json.parseObject(Utf8.decode(logprobJson)), tokenId);
      } catch (RuntimeException e) {  // the shim wrote it from parsed JSON: not expected
        Log.LOG.log(System.Logger.Level.ERROR,
            "llama2: bad logprob fields of token " + index + " of '" + id + "'", e);
      }
    }
    try {
      listener.onToken(piece, index, tokenId, logprob);
    } catch (Throwable t) {  // nobody up the reader thread could handle it: log, keep going
      Log.LOG.log(System.Logger.Level.WARNING,
          "llama2: the TokenListener of generation '" + id + "' threw (ignored)", t);
    }
  }

  void onFinal(byte[] eventJson) {
    Map<String, Object> ev;
    Completion c = null;
    Llama2Exception failure = null;
    synchronized (this) {
      if (ended) return;
      ended = true;
      if (timer != null) timer.cancel(false);
      try {
        ev = Json.parseObject(Utf8.decode(eventJson));
        c = Events.completion(ev, text.toString(), List.copyOf(tokenIds));
      } catch (Llama2Exception e) {
        failure = e;
      } catch (RuntimeException e) {
        failure = new Llama2Exception("internal", "bad final event: " + e.getMessage(), id, e);
      }
    }
    // Outside the lock: dependent stages of the future run here.
    if (failure != null) {
      future.completeExceptionally(failure);
    } else {
      future.complete(c);
    }
  }

  /** No final event before the per-call timeout (+ grace): give up and free the server's slot. */
  private void clientTimeout() {
    synchronized (this) {
      if (ended || !Calls.unregister(key, this)) return;
      ended = true;
    }
    client.cancelQuietly(id);
    future.completeExceptionally(new GenerationTimeoutException("generation '" + id
        + "' got no final event within its timeout; it was cancelled", id, null));
  }

  /** Ends it with a local failure (the request could not be sent). */
  void fail(Llama2Exception e) {
    synchronized (this) {
      if (ended) return;
      ended = true;
    }
    future.completeExceptionally(e);
  }
}
