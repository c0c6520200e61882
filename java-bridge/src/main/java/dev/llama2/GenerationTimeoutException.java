package dev.llama2;

/**
 * The per-call timeout ({@link GenerationParams.Builder#timeout}) passed: the server ended the
 * generation with {@code finish_reason: "timeout"}, or no final event came in time and the client
 * cancelled it. {@link #partial()} holds what was generated before, when the server reported it.
 */
public class GenerationTimeoutException extends Llama2Exception {
  private static final long serialVersionUID = 1L;
  private final transient Completion partial;

  public GenerationTimeoutException(String message, String requestId, Completion partial) {
    super("timeout", message, requestId);
    this.partial = partial;
  }

  /** The text and usage generated before the deadline, or null when unknown. */
  public Completion partial() {
    return partial;
  }
}
