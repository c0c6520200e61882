package dev.llama2;

import java.lang.System.Logger.Level;
import java.util.Objects;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CompletionException;
import java.util.concurrent.Executor;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Flow;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Function;

/**
 * The tokens of a generation as a {@link Flow.Publisher} ({@link Llama2Client#publisher}), for
 * reactive code: Reactor's {@code JdkFlowAdapter.flowPublisherToFlux}, RxJava's
 * {@code FlowAdapters}, Spring WebFlux, Mutiny, or a plain {@link Flow.Subscriber}.
 *
 * <p>Cold: each {@link #subscribe} starts its own generation, at the subscriber's first
 * {@code request(n)} (a subscription that requests nothing costs the server nothing). It follows
 * the Reactive Streams rules:
 *
 * <ul>
 *   <li><b>Back-pressure.</b> {@code onNext} is called only for requested tokens. The server does
 *       not pause a generation (the protocol has no flow control), so tokens that arrive beyond the
 *       demand wait in this subscription's queue, at most {@code max_new_tokens} of them.
 *   <li><b>Cancel.</b> {@link Flow.Subscription#cancel()} cancels the generation on the server
 *       (its KV blocks are freed at once); no signal follows.
 *   <li><b>End.</b> {@code onComplete} after the last token (finish reason stop, length or
 *       cancelled); {@code onError} with the typed {@link Llama2Exception} of an error event
 *       ({@link QueueFullException}, {@link InvalidRequestException}, ...), a timeout
 *       ({@link GenerationTimeoutException}) or a lost connection ({@link
 *       ServerUnavailableException}); {@link IllegalArgumentException} for {@code request(n <= 0)}.
 * </ul>
 *
 * <p>Signals are serial and run on the publisher's {@link Executor} (by default a shared pool of
 * daemon threads), never on the connection's reader thread, so a slow subscriber delays only its
 * own generation. A subscriber method that throws (which the rules forbid) cancels the generation
 * and is logged to the {@code dev.llama2} {@link System.Logger}.
 */
public final class TokenPublisher implements Flow.Publisher<Token> {
  /** Default executor: daemon threads, made when needed, ended after 60 s idle. */
  static final ExecutorService SIGNALS = Executors.newCachedThreadPool(r -> {
    Thread t = new Thread(r, "llama2-publisher");
    t.setDaemon(true);
    return t;
  });

  private final Function<TokenListener, Generation> starter;
  private final Executor executor;

  /** {@code starter}: starts one generation that feeds the listener. */
  TokenPublisher(Function<TokenListener, Generation> starter, Executor executor) {
    this.starter = starter;
    this.executor = Objects.requireNonNull(executor, "executor");
  }

  @Override
  public void subscribe(Flow.Subscriber<? super Token> subscriber) {
    Objects.requireNonNull(subscriber, "subscriber");  // rule 1.9
    new Subscription(subscriber).signal();
  }

  /** One subscriber's generation. Every signal to the subscriber is made by drain(). */
  private final class Subscription implements Flow.Subscription {
    private final Flow.Subscriber<? super Token> subscriber;
    private final ConcurrentLinkedQueue<Token> queue = new ConcurrentLinkedQueue<>();
    private final AtomicLong demand = new AtomicLong();
    // Work-in-progress counter: whoever raises it from 0 schedules drain(), which runs until it
    // has seen every increment; so at most one drain() runs at a time (signals stay serial).
    private final AtomicInteger wip = new AtomicInteger();
    private boolean subscribed;  // drain() only
    private boolean terminated;  // drain() only
    private volatile boolean started;
    private volatile boolean cancelled;
    private volatile Generation generation;
    private volatile boolean finished;  // the generation's outcome is known
    private volatile Throwable failure;  // its failure, or a rule violation; null on success
    private volatile boolean violated;  // request(n <= 0): signalled although cancelled

    Subscription(Flow.Subscriber<? super Token> subscriber) {
      this.subscriber = subscriber;
    }

    void signal() {
      if (wip.getAndIncrement() == 0) executor.execute(this::drain);
    }

    @Override
    public void request(long n) {
      if (n <= 0) {  // rule 3.9
        fail(new IllegalArgumentException("request(n) needs n > 0 (got " + n + ")"));
        return;
      }
      demand.getAndAccumulate(n, (a, b) -> a + b < 0 ? Long.MAX_VALUE : a + b);  // rule 3.17
      if (!started && !cancelled) start();
      signal();
    }

    private synchronized void start() {
      if (started) return;
      started = true;
      try {
        Generation g = starter.apply(TokenListener.withLogprobs((text, index, tokenId, logprob) -> {
          queue.add(new Token(text, index, tokenId, logprob));
          signal();
        }));
        g.completion().whenComplete((c, e) -> {
          if (e != null) failure = e instanceof CompletionException ? e.getCause() : e;
          finished = true;
          signal();
        });
        generation = g;
        if (cancelled) g.cancel();  // cancel() ran while the request was being sent
      } catch (RuntimeException e) {  // refused before sending (closed client, bad request)
        failure = e;
        finished = true;
      }
    }

    @Override
    public void cancel() {
      cancelled = true;
      Generation g = generation;
      if (g != null) g.cancel();
      signal();  // lets drain() drop the queue
    }

    private void fail(Throwable t) {
      failure = t;
      violated = true;
      finished = true;
      cancelled = true;  // no further request() starts anything
      Generation g = generation;
      if (g != null) g.cancel();
      signal();
    }

    private void drain() {
      int missed = 1;
      do {
        if (!subscribed) {
          subscribed = true;
          call(() -> subscriber.onSubscribe(this));  // rule 1.3: serial with what follows
        }
        emit();
        missed = wip.addAndGet(-missed);
      } while (missed != 0);
    }

    /** Delivers what is requested, then the end once the queue is empty. drain() only. */
    private void emit() {
      if (terminated) {
        queue.clear();
        return;
      }
      while (demand.get() > 0 && !cancelled) {
        Token t = queue.poll();
        if (t == null) break;
        demand.decrementAndGet();
        if (!call(() -> subscriber.onNext(t))) return;
      }
      // A plain cancel ends silently (rule 1.8); the subscriber's own rule violation
      // (request(n <= 0)) is signalled although it cancelled the generation (rule 3.9).
      if (cancelled && !violated) {
        terminated = true;
        queue.clear();
        return;
      }
      if (finished && (queue.isEmpty() || failure != null)) {
        terminated = true;
        queue.clear();
        Throwable f = failure;
        call(f == null ? subscriber::onComplete : () -> subscriber.onError(f));
      }
    }

    /** Runs a subscriber method; one that throws cancels the subscription (rule 2.13). */
    private boolean call(Runnable r) {
      try {
        r.run();
        return true;
      } catch (Throwable t) {
        Generation g = generation;
        Log.LOG.log(Level.WARNING, "llama2: a Flow.Subscriber threw"
            + (g != null ? " (generation '" + g.requestId() + "')" : "") + "; it was cancelled", t);
        terminated = true;
        cancelled = true;
        if (g != null) g.cancel();
        return false;
      }
    }
  }
}
