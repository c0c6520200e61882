package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Chat dialogs through the JNA client against a real server (tiny model, greedy). */
@Timeout(60)
class ChatTest {
  static TestServer server;
  static Llama2Client client;

  @BeforeAll
  static void start() throws Exception {
    server = TestServer.tiny();
    client = Llama2Client.connect(server.socket);
  }

  @AfterAll
  static void stop() throws Exception {
    if (client != null) client.close();
  }

  static final List<ChatMessage> DIALOG = List.of(ChatMessage.system("Answer briefly."),
      ChatMessage.user("How do ranks talk?"), ChatMessage.assistant("Over NCCL."),
      ChatMessage.user("And the socket?"));

  static GenerationParams greedy() {
    return GenerationParams.builder().temperature(0).maxNewTokens(16).ignoreEos(true).build();
  }

  /** Blocking and streamed chat give the same greedy text; the prompt is the encoded dialog. */
  @Test
  void blockingAndStreamedChatAgree() throws Exception {
    Completion c = client.chat(DIALOG, greedy());
    assertEquals(16, c.completionTokens());
    // [INST] ... [/INST] wrappers, BOS/EOS per pair and the system block: far more tokens than the
    // four contents' words.
    assertTrue(c.promptTokens() > 30, "prompt tokens " + c.promptTokens());
    StringBuilder pieces = new StringBuilder();
    Completion s = client.chatStream(DIALOG, greedy(), (text, index, id) -> pieces.append(text))
        .completion().get(30, TimeUnit.SECONDS);
    assertEquals(c.text(), s.text());
    assertEquals(c.text(), pieces.toString());
    assertEquals(c.tokenIds(), s.tokenIds());
  }

  /** A dialog that breaks the order rule is refused by the server, naming the rule. */
  @Test
  void badDialogIsRefusedWithTheRule() {
    InvalidRequestException e = assertThrows(InvalidRequestException.class,
        () -> client.chat(List.of(ChatMessage.user("a"), ChatMessage.user("b")), greedy()));
    assertTrue(e.getMessage().contains("role 'user' where 'assistant' is expected"),
        e.getMessage());
  }
}
