package dev.llama2;

import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;

/**
 * The tokens of one generation as an {@link Iterator} of text pieces ({@link Llama2Client#tokens}),
 * one element per token, in order; a piece may be empty (see {@link TokenListener}). Use it in a
 * try-with-resources block: {@link #close()} before the end cancels the generation on the server.
 *
 * <pre>{@code
 * try (TokenStream tokens = client.tokens("Once upon a time", params)) {
 *   for (String piece : tokens) System.out.print(piece);
 * }
 * }</pre>
 *
 * <p>{@code hasNext()} blocks until the next token or the end; a failure (server error, timeout,
 * lost connection) is thrown from it as the typed {@link Llama2Exception}. One consumer thread;
 * {@code close()} may come from any thread.
 */
public final class TokenStream implements Iterable<String>, Iterator<String>, AutoCloseable {
  private static final Object END = new Object();

  private final LinkedBlockingQueue<Object> queue = new LinkedBlockingQueue<>();
  private Generation generation;
  private String next;
  private boolean ended;
  private boolean iterated;
  private volatile boolean closed;

  TokenStream() {}

  /** The listener that feeds this stream (runs on the reader thread: only enqueues). */
  TokenListener listener() {
    return (text, index, tokenId) -> queue.add(text);
  }

  void attach(Generation g) {
    generation = g;
    g.completion().whenComplete((c, e) -> queue.add(END));
  }

  /** The protocol id of the request. */
  public String requestId() {
    return generation.requestId();
  }

  /** This stream itself; an iterator can be taken once. */
  @Override
  public Iterator<String> iterator() {
    if (iterated) throw new IllegalStateException("a TokenStream can be iterated once");
    iterated = true;
    return this;
  }

  @Override
  public boolean hasNext() {
    if (next != null) return true;
    if (ended || closed) return false;
    Object o;
    try {
      o = queue.take();
    } catch (InterruptedException e) {
      close();
      Thread.currentThread().interrupt();
      throw new GenerationInterruptedException("interrupted while waiting for a token of '"
          + requestId() + "'; the generation was cancelled", requestId(), e);
    }
    if (o == END) {
      ended = true;
      if (!closed) completion();  // throws the failure, if any
      return false;
    }
    next = (String) o;
    return true;
  }

  @Override
  public String next() {
    if (!hasNext()) throw new NoSuchElementException();
    String s = next;
    next = null;
    return s;
  }

  /**
   * The finished generation (text, token count, finish reason, timings) once the iterator reached
   * the end; null before. Throws the failure of a generation that failed.
   */
  public Completion completion() {
    CompletableFuture<Completion> f = generation.completion();
    if (!f.isDone()) return null;
    try {
      return f.get();
    } catch (ExecutionException e) {
      throw Generation.rethrow(e.getCause());
    } catch (InterruptedException e) {
      throw new IllegalStateException(e);  // cannot happen: the future is done
    }
  }

  /** Stops the iteration; cancels the generation when it has not ended. Idempotent. */
  @Override
  public void close() {
    closed = true;
    if (!generation.isDone()) generation.cancel();
  }
}
