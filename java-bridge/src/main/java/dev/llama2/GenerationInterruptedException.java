package dev.llama2;

/**
 * The thread waiting in a blocking call ({@link Llama2Client#generate}, {@link Llama2Client#chat},
 * {@link TokenStream#hasNext()}) was interrupted. The generation was cancelled on the server (its
 * KV blocks are freed) and the thread's interrupt flag is set again, so code further up still sees
 * the interrupt. Code {@code interrupted}.
 */
public class GenerationInterruptedException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public GenerationInterruptedException(String message, String requestId, Throwable cause) {
    super("interrupted", message, requestId, cause);
  }
}
