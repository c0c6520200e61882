package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;

import org.junit.jupiter.api.Test;

/** Every error code of docs/PROTOCOL.md maps to its typed exception, with code and id kept. */
class ErrorCodeTest {
  @Test
  void codesMapToTypedExceptions() {
    assertInstanceOf(TooManyInFlightException.class,
        Llama2Exception.fromCode("too_many_in_flight", "16 in flight", "r1"));
    assertInstanceOf(QueueFullException.class, Llama2Exception.fromCode("queue_full", "full", "r1"));
    assertInstanceOf(PromptTooLongException.class,
        Llama2Exception.fromCode("prompt_too_long", "long", "r1"));
    assertInstanceOf(InvalidRequestException.class,
        Llama2Exception.fromCode("invalid_request", "bad", "r1"));
    assertInstanceOf(ShuttingDownException.class,
        Llama2Exception.fromCode("shutting_down", "bye", "r1"));
    Llama2Exception e = Llama2Exception.fromCode("too_many_in_flight", "16 in flight", "r7");
    assertEquals("too_many_in_flight", e.code());
    assertEquals("r7", e.requestId());
    assertEquals("16 in flight", e.getMessage());
    Llama2Exception other = Llama2Exception.fromCode("too_many_connections", "no fd", null);
    assertEquals(Llama2Exception.class, other.getClass());
    assertEquals("too_many_connections", other.code());
  }
}
