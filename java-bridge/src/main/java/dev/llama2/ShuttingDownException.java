package dev.llama2;

/** {@code shutting_down}: the server is draining (SIGTERM/SIGINT) and takes no new work. */
public class ShuttingDownException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public ShuttingDownException(String message, String requestId) {
    super("shutting_down", message, requestId);
  }
}
