package dev.llama2;

import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * One turn of a chat dialog for {@link Llama2Client#chat}: the server encodes the dialog in the
 * Llama-2 chat format (an optional first system message, then user and assistant alternating,
 * starting and ending with user; see docs/PROTOCOL.md). With tools, an assistant turn may carry the
 * calls the model made ({@link #assistantToolCalls}) and {@link Role#TOOL} messages their results
 * ({@link #tool}); the server renders them into user and assistant turns (docs/tool-calling.md).
 *
 * @param role       who speaks
 * @param content    the text ("" for an assistant turn that only calls tools)
 * @param toolCalls  an assistant turn's calls, else empty
 * @param toolCallId a {@link Role#TOOL} message's call id, else null
 */
public record ChatMessage(Role role, String content, List<ToolCall> toolCalls, String toolCallId) {
  /** Who speaks a turn. */
  public enum Role {
    SYSTEM, USER, ASSISTANT, TOOL;

    String wire() {
      return name().toLowerCase(java.util.Locale.ROOT);
    }
  }

  public ChatMessage {
    Objects.requireNonNull(role, "role");
    Objects.requireNonNull(content, "content");
    toolCalls = List.copyOf(toolCalls);
    if (!toolCalls.isEmpty() && role != Role.ASSISTANT) {
      throw new IllegalArgumentException("only an assistant message carries tool_calls (got "
          + role.wire() + ")");
    }
    if ((role == Role.TOOL) != (toolCallId != null)) {
      throw new IllegalArgumentException("a tool message, and only a tool message, needs a "
          + "tool_call_id (got role " + role.wire() + ", tool_call_id " + toolCallId + ")");
    }
  }

  /** A turn without tool calls. */
  public ChatMessage(Role role, String content) {
    this(role, content, List.of(), null);
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

  /** The assistant turn that made {@code calls} (e.g. {@link Completion#toolCalls()}). */
  public static ChatMessage assistantToolCalls(List<ToolCall> calls) {
    if (calls.isEmpty()) throw new IllegalArgumentException("assistantToolCalls needs calls");
    return new ChatMessage(Role.ASSISTANT, "", calls, null);
  }

  /** The protocol's message object: role, content, and the tool fields when present. */
  void appendJson(StringBuilder b) {
    b.append("{\"role\":\"").append(role.wire()).append("\",\"content\":");
    if (content.isEmpty() && !toolCalls.isEmpty()) {
      b.append("null");  // OpenAI's form of a turn that only calls tools
    } else {
      Json.quoteTo(b, content);
    }
    if (!toolCalls.isEmpty()) {
      List<Object> calls = new ArrayList<>();
      for (ToolCall c : toolCalls) calls.add(c.toJson());
      b.append(",\"tool_calls\":");
      Json.writeTo(b, calls);
    }
    if (toolCallId != null) {
      b.append(",\"tool_call_id\":");
      Json.quoteTo(b, toolCallId);
    }
    b.append('}');
  }

  /** The result of call {@code toolCallId} ({@link ToolCall#id()}). */
  public static ChatMessage tool(String toolCallId, String content) {
    return new ChatMessage(Role.TOOL, content, List.of(), Objects.requireNonNull(toolCallId, "toolCallId"));
  }
}
