package dev.llama2;

/**
 * {@code server_unavailable}: no server listens on the socket, the connection was lost (server
 * killed or stopped), or this client was closed. Every later call on the same client fails the same
 * way; connect a new one.
 */
public class ServerUnavailableException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public ServerUnavailableException(String message, String requestId) {
    super("server_unavailable", message, requestId);
  }
}
