package dev.llama2;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** No server: typed exceptions at once, and a clear message when the library is missing. */
@Timeout(60)
class ServerUnavailableTest {
  @Test
  void connectingToNoServerFailsPromptly() {
    String path = TestServer.tmpDir().resolve("nobody.sock").toString();
    long t0 = System.nanoTime();
    ServerUnavailableException e = assertThrows(ServerUnavailableException.class,
        () -> Llama2Client.connect(path, Duration.ofSeconds(5)));
    long ms = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0);
    assertTrue(ms < 1000, "answered in " + ms + " ms, not after the connect timeout");
    assertTrue(e.getMessage().contains("server not running") && e.getMessage().contains(path),
        e.getMessage());
    assertEquals("server_unavailable", e.code());
  }

  @Test
  void aFileThatIsNotASocketIsRefused() throws IOException {
    Path file = TestServer.tmpDir().resolve("plain-file");
    Files.writeString(file, "x");
    assertThrows(ServerUnavailableException.class, () -> Llama2Client.connect(file.toString()));
    String tooLong = "/tmp/" + "x".repeat(200);
    assertThrows(ServerUnavailableException.class, () -> Llama2Client.connect(tooLong));
    assertThrows(IllegalArgumentException.class,
        () -> Llama2Client.connect(file.toString(), Duration.ZERO));
  }

  /** A child JVM without jna.library.path gets Llama2Exception(library_not_found) saying what to set. */
  @Test
  void missingLibraryGivesAClearMessage() throws IOException, InterruptedException {
    String java = ProcessHandle.current().info().command().orElse("java");
    String cp = System.getProperty("llama2.classpath");
    assertTrue(cp != null, "llama2.classpath is set by CMake");
    for (List<String> props : List.of(List.<String>of(), List.of("-Djna.library.path=/nonexistent"))) {
      List<String> cmd = new java.util.ArrayList<>(List.of(java, "-cp", cp));
      cmd.addAll(props);
      cmd.add("dev.llama2.LoadProbe");
      Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
      assertTrue(p.waitFor(30, TimeUnit.SECONDS));
      String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
      assertTrue(out.startsWith("library_not_found: cannot load libllama2shim.so"), out);
      assertTrue(out.contains("-Djna.library.path=DIR"), out);
    }
  }

  /** The same child JVM with jna.library.path finds it (so the test above can fail). */
  @Test
  void libraryIsFoundThroughJnaLibraryPath() throws IOException, InterruptedException {
    String java = ProcessHandle.current().info().command().orElse("java");
    Process p = new ProcessBuilder(java, "-cp", System.getProperty("llama2.classpath"),
        "-Djna.library.path=" + System.getProperty("jna.library.path"), "dev.llama2.LoadProbe")
        .redirectErrorStream(true).start();
    assertTrue(p.waitFor(30, TimeUnit.SECONDS));
    String out = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
    assertTrue(out.startsWith("server_unavailable: "), out);
  }
}
