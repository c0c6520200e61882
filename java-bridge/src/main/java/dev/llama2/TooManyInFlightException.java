package dev.llama2;

/**
 * {@code too_many_in_flight}: this connection already has the server's
 * {@code --max-inflight-per-connection} generations unfinished (default: half of
 * {@code --max-batch-size}). Answered at once; the connection stays usable. A {@link Llama2Client}
 * is one connection: keep its concurrent generations under the cap (e.g. with a semaphore), wait
 * for one to finish, or spread the load over several clients.
 */
public class TooManyInFlightException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public TooManyInFlightException(String message, String requestId) {
    super("too_many_in_flight", message, requestId);
  }
}
