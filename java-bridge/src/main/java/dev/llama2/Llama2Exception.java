package dev.llama2;

/**
 * Base of every failure reported by the engine or this client. Unchecked, so that it can surface
 * from {@link java.util.Iterator} methods and lambdas; the subclasses map the protocol's error codes
 * (docs/PROTOCOL.md), which {@link #code()} returns as sent ({@code internal}, ...).
 */
public class Llama2Exception extends RuntimeException {
  private static final long serialVersionUID = 1L;
  private final String code;
  private final String requestId;

  public Llama2Exception(String code, String message, String requestId) {
    super(message);
    this.code = code;
    this.requestId = requestId;
  }

  public Llama2Exception(String code, String message, String requestId, Throwable cause) {
    super(message, cause);
    this.code = code;
    this.requestId = requestId;
  }

  /** The protocol's error code, e.g. {@code queue_full}; {@code client_error} for local misuse. */
  public String code() {
    return code;
  }

  /** The generation's request id, or null when the failure is not about one generation. */
  public String requestId() {
    return requestId;
  }

  /** The typed exception for an error event's code. */
  static Llama2Exception fromCode(String code, String message, String requestId) {
    String m = message == null || message.isEmpty() ? code : message;
    switch (code == null ? "" : code) {
      case "queue_full": return new QueueFullException(m, requestId);
      case "too_many_in_flight": return new TooManyInFlightException(m, requestId);
      case "prompt_too_long": return new PromptTooLongException(m, requestId);
      case "timeout": return new GenerationTimeoutException(m, requestId, null);
      case "invalid_request": return new InvalidRequestException(m, requestId);
      case "server_unavailable": return new ServerUnavailableException(m, null);
      case "shutting_down": return new ShuttingDownException(m, requestId);
      default: return new Llama2Exception(code == null ? "internal" : code, m, requestId);
    }
  }
}
