package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class JsonTest {
  @Test
  void parsesEngineEvents() {
    Map<String, Object> ev = Json.parseObject("{\"event\":\"done\",\"id\":\"r1\",\"finish_reason\":"
        + "\"length\",\"seed\":18446744073709551615,\"token_ids\":[1,2],\"usage\":{\"prompt_tokens\":5},"
        + "\"timings\":{\"total_s\":0.31e0},\"text\":\"a\\n\\u00e9\\ud83c\\udf42 \u5317\",\"x\":null,\"t\":true}");
    assertEquals("done", ev.get("event"));
    assertEquals(-1L, Json.num(ev, "seed", 0));
    assertEquals(List.of(1L, 2L), ev.get("token_ids"));
    assertEquals(5L, Json.num(Json.obj(ev, "usage"), "prompt_tokens", 0));
    assertEquals(0.31, Json.dbl(Json.obj(ev, "timings"), "total_s", 0));
    assertEquals("a\n\u00e9\uD83C\uDF42 \u5317", ev.get("text"));
    assertTrue(ev.containsKey("x"));
    assertEquals(Boolean.TRUE, ev.get("t"));
  }

  @Test
  void quoteRoundTrips() {
    String s = "line\nnext \"q\" \\ \t \u0001 \u2028 caf\u00e9 \uD83C\uDF42";
    String q = Json.quote(s);
    assertTrue(!q.contains("\n") && !q.contains("\u2028"), "no raw line breaks: " + q);
    assertEquals(s, Json.parse(q));
  }

  @Test
  void refusesMalformedInput() {
    for (String bad : new String[] {"", "{", "{\"a\":}", "[1,]", "\"abc", "{\"a\":1} x", "tru",
        "[".repeat(100) + "]".repeat(100)}) {
      assertThrows(IllegalArgumentException.class, () -> Json.parse(bad), bad);
    }
  }
}
