package dev.llama2;

/** Why a generation ended (the {@code done} event's {@code finish_reason}). */
public enum FinishReason {
  /** EOS or a stop string. */
  STOP,
  /** {@code max_new_tokens} reached. */
  LENGTH,
  /** Cancelled by {@link Generation#cancel()}, {@link TokenStream#close()} or {@link Llama2Client#cancel}. */
  CANCELLED,
  /** The per-call timeout passed (surfaced as {@link GenerationTimeoutException}). */
  TIMEOUT;

  static FinishReason parse(String s) {
    switch (s == null ? "" : s) {
      case "stop": return STOP;
      case "length": return LENGTH;
      case "cancelled": return CANCELLED;
      case "timeout": return TIMEOUT;
      default: throw new Llama2Exception("internal", "unknown finish_reason '" + s + "'", null);
    }
  }
}
