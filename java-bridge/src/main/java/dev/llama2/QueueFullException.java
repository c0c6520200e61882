package dev.llama2;

/** {@code queue_full}: more than {@code --max-queue} generations wait; answered at once. Retry later. */
public class QueueFullException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public QueueFullException(String message, String requestId) {
    super("queue_full", message, requestId);
  }
}
