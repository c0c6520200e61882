package dev.llama2;

/** {@code prompt_too_long}: prompt + max_new_tokens exceed the server's {@code --max-seq-len}. */
public class PromptTooLongException extends Llama2Exception {
  private static final long serialVersionUID = 1L;

  public PromptTooLongException(String message, String requestId) {
    super("prompt_too_long", message, requestId);
  }
}
