package dev.llama2;

import java.util.Objects;

/**
 * One turn of a chat dialog for {@link Llama2Client#chat}: the server encodes the dialog in the
 * Llama-2 chat format (an optional first system message, then user and assistant alternating,
 * starting and ending with user; see docs/PROTOCOL.md).
 */
public record ChatMessage(Role role, String content) {
  /** Who speaks a turn. */
  public enum Role {
    SYSTEM, USER, ASSISTANT;

    String wire() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  public ChatMessage {
    Objects.requireNonNull(role, "role");
    Objects.requireNonNull(content, "content");
  }

  public static ChatMessage system(String content) {
    return new ChatMessage(Role.SYSTEM, content);
  }

  public static ChatMessage user(String content) {
    return new ChatMessage(Role.USER, content);
  }

  public static ChatMessage assistant(String content) {
    return new ChatMessage(Role.ASSISTANT, content);
  }
}
