package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Tools and tool turns through Llama2Client's chat API over the socket, on the replay server (a
 * context long enough for the tools' JSON): typed ToolCalls whose arguments are valid against the
 * record-made schema ({@link SchemaCheck}), blocking and streamed alike, and a round trip that
 * sends the call and its result back.
 */
@Timeout(120)
class ChatToolsTest {
  static TestServer server;
  static Llama2Client client;

  enum Guests { TWO, FOUR, SIX }

  enum Meal { LUNCH, DINNER }

  record Booking(Guests guests, Meal meal, boolean terrace) {}

  record Cancel(boolean confirm) {}

  static final Tool BOOK = Tool.function("bookTable", "Books a restaurant table", Booking.class);
  static final Tool CANCEL = Tool.function("cancelBooking", "Cancels a booking", Cancel.class);
  static final List<ChatMessage> ASK = List.of(ChatMessage.user("Book a table for two tonight."));

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.replay();
    client = Llama2Client.connect(server.socket);
  }

  @AfterAll
  static void stop() {
    if (client != null) client.close();
  }

  static GenerationParams tools(ToolChoice choice, long seed) {
    return GenerationParams.builder().temperature(0.7).seed(seed).maxNewTokens(160)
        .tools(List.of(BOOK, CANCEL)).toolChoice(choice).build();
  }

  static void checkCalls(Completion c) {
    assertTrue(c.hasToolCalls(), "a call: " + c.text());
    for (ToolCall call : c.toolCalls()) {
      assertTrue(call.id().matches("call_[0-9a-f]{24}"), call.id());
      Tool tool = call.name().equals(BOOK.name()) ? BOOK : CANCEL;
      assertTrue(call.name().equals(tool.name()), call.name());
      assertEquals(List.of(), SchemaCheck.errors(call.argumentsMap(),
          Json.parseObject(tool.parametersJson())), call.arguments());
    }
  }

  @Test
  void requiredGivesTypedCallsValidForTheRecordSchema() {
    Completion c = client.chat(ASK, tools(ToolChoice.REQUIRED, 21));
    assertEquals(FinishReason.STOP, c.finishReason());
    checkCalls(c);
  }

  @Test
  void aNamedFunctionStreamedAsTheBlockingCall() throws Exception {
    GenerationParams p = tools(ToolChoice.function("cancelBooking"), 5);
    Completion whole = client.chat(ASK, p);
    StringBuilder pieces = new StringBuilder();
    Completion streamed = client.chatStream(ASK, p, (text, i, id) -> pieces.append(text)).await();
    checkCalls(whole);
    assertEquals(1, whole.toolCalls().size());
    assertEquals("cancelBooking", whole.toolCalls().get(0).name());
    assertEquals(whole.text(), pieces.toString());
    assertEquals(whole.toolCalls().get(0).arguments(), streamed.toolCalls().get(0).arguments());
    Map<String, Object> args = streamed.toolCalls().get(0).argumentsMap();
    assertTrue(args.get("confirm") instanceof Boolean, args.toString());
  }

  @Test
  void theCallAndItsResultGoBackInTheHistory() {
    Completion first = client.chat(ASK, tools(ToolChoice.REQUIRED, 8));
    checkCalls(first);
    List<ChatMessage> history = new java.util.ArrayList<>(ASK);
    history.add(ChatMessage.assistantToolCalls(first.toolCalls()));
    for (ToolCall call : first.toolCalls()) history.add(ChatMessage.tool(call.id(), "\"done\""));
    GenerationParams none = tools(ToolChoice.NONE, 8).toBuilder().maxNewTokens(12).build();
    Completion second = client.chat(history, none);
    assertFalse(second.hasToolCalls(), second.text());
    Completion alone = client.chat(ASK, none);  // none: the tools are not rendered either
    assertTrue(second.promptTokens() > alone.promptTokens() + 20, "the call and result were sent: "
        + second.promptTokens() + " vs " + alone.promptTokens());
    InvalidRequestException e = assertThrows(InvalidRequestException.class, () -> client.chat(
        List.of(ChatMessage.user("x"), ChatMessage.tool("call_nothing", "y")), tools(ToolChoice.AUTO, 1)));
    assertTrue(e.getMessage().contains("tool"), e.getMessage());
  }

  @Test
  void toolsNeedAChatDialog() {
    IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
        () -> client.generate("x", tools(ToolChoice.AUTO, 1)));
    assertTrue(e.getMessage().startsWith("tools need a chat dialog"), e.getMessage());
  }
}
