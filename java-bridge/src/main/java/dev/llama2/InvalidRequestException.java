package dev.llama2;

/** {@code invalid_request}: the server refused a key or value (the message names it). */
public class InvalidRequestException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public InvalidRequestException(String message, String requestId) {
    super("invalid_request", message, requestId);
  }
}
