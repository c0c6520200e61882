package dev.llama2;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Stream;

/**
 * A real {@code mpirun -np 2 llama2 serve} for the tests, through tests/integration/mpirun.sh (root
 * allowed, oversubscription, hard time limit). Paths come from system properties set by CMake:
 * llama2.binary, llama2.model (tiny-gqa), llama2.slowModel, llama2.mpirun.
 */
final class TestServer implements AutoCloseable {
  static final String BINARY = required("llama2.binary");
  static final String MODEL = required("llama2.model");
  static final String MPIRUN = required("llama2.mpirun");

  final String socket;
  final Path log;
  private final Process process;  // mpirun.sh, which execs `timeout ... mpirun`

  private static String required(String name) {
    String v = System.getProperty(name);
    if (v == null) throw new IllegalStateException("system property " + name + " is not set (run via ctest)");
    return v;
  }

  /**
   * The slow model: large enough that a generation lasts seconds on the CPU (the tiny model makes
   * ~3000 tok/s). CMake builds it with `llama2 make-test-model` (llama2.slowModel).
   */
  static String slowModel() {
    return required("llama2.slowModel");
  }

  private static TestServer tiny;
  private static TestServer slow;
  private static TestServer replay;
  private static final List<Path> DIRS = new ArrayList<>();

  static {
    // At JVM exit: stop the shared servers, then remove every temporary directory (sockets, logs).
    Runtime.getRuntime().addShutdownHook(new Thread(() -> {
      for (TestServer x : new TestServer[] {tiny, slow, replay}) {
        try {
          if (x != null) x.close();
        } catch (Exception ignored) {
          // exiting anyway; mpirun.sh's time limit ends a job that outlives us
        }
      }
      synchronized (DIRS) {
        for (Path d : DIRS) deleteTree(d);
      }
    }));
  }

  private static void deleteTree(Path dir) {
    try (Stream<Path> s = Files.walk(dir)) {
      s.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException ignored) {
      // best effort
    }
  }

  /** The tiny model with default limits, shared by the test classes of this JVM. */
  static synchronized TestServer tiny() throws IOException, InterruptedException {
    // One shared client runs 32 generations at once (ConcurrencyTest): above the default
    // per-connection cap (half of --max-batch-size), so the cap is raised for these tests.
    if (tiny == null) tiny = new TestServer("tiny", MODEL, "--max-inflight-per-connection", "64");
    return tiny;
  }

  /**
   * The slow model with one batch slot and one queue place, shared by the test classes of this JVM:
   * a second request waits, a third is refused with queue_full. Tests leave it idle.
   */
  static synchronized TestServer slow() throws IOException, InterruptedException {
    if (slow == null) {
      // One thread per rank whatever the machine: the slow tests count on a generation lasting
      // seconds (about 900 tokens/s here at 2 ranks).
      slow = new TestServer("slow", slowModel(), "--max-batch-size", "1", "--max-queue", "1",
          "--cpu-threads", "1", "--max-inflight-per-connection", "4");
    }
    return slow;
  }

  /** The name the replay server serves its model under. */
  static final String REPLAY_MODEL_NAME = "replay-model";

  /**
   * The replay model (llama2.replayModel: random weights, models/docs-8m's tokenizer, 2,048
   * positions) with serve --http on a free port, shared by the test classes of this JVM.
   */
  static synchronized TestServer replay() throws IOException, InterruptedException {
    if (replay == null) {
      replay = new TestServer("replay", required("llama2.replayModel"), "--http", "127.0.0.1:0",
          "--served-model-name", REPLAY_MODEL_NAME, "--max-batch-size", "4");
    }
    return replay;
  }

  static Path tmpDir() {
    try {
      // Short /tmp paths: a Unix socket path must fit in 107 bytes.
      Path d = Files.createTempDirectory(Path.of("/tmp"), "llama2-java-");
      synchronized (DIRS) {
        DIRS.add(d);
      }
      return d;
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  /** Starts a server on `model` with extra serve flags and waits until it accepts connections. */
  TestServer(String name, String model, String... extra) throws IOException, InterruptedException {
    this(name, model, Map.of(), extra);
  }

  /** The same with extra environment variables for the job (test hooks). */
  TestServer(String name, String model, Map<String, String> env, String... extra)
      throws IOException, InterruptedException {
    Path dir = tmpDir();
    socket = dir.resolve(name + ".sock").toString();
    log = dir.resolve(name + ".log");
    List<String> cmd = new ArrayList<>(List.of(MPIRUN, "2", BINARY, "serve", "--model", model,
        "--socket", socket, "--quiet"));
    cmd.addAll(List.of(extra));
    ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true)
        .redirectOutput(log.toFile());
    pb.environment().putIfAbsent("LLAMA2_TEST_TIMEOUT", "290");
    // An idle rank waits in MPI; yielding there leaves the 2-core CI machine to the JVM under test.
    pb.environment().put("OMPI_MCA_mpi_yield_when_idle", "1");
    pb.environment().putAll(env);
    process = pb.start();
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(90);
    while (System.nanoTime() < deadline) {
      if (!process.isAlive()) fail("server " + name + " exited at start-up:\n" + logText());
      try {
        Llama2Client.connect(socket, Duration.ofMillis(200)).close();
        return;
      } catch (ServerUnavailableException notYet) {
        Thread.sleep(100);
      }
    }
    close();
    fail("server " + name + " did not accept connections within 90 s:\n" + logText());
  }

  /** http://127.0.0.1:PORT of a server started with {@code --http 127.0.0.1:0}. */
  java.net.URI httpBase() throws IOException, InterruptedException {
    java.util.regex.Pattern p = java.util.regex.Pattern.compile("HTTP on 127\\.0\\.0\\.1:(\\d+)");
    long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
    while (System.nanoTime() < deadline) {
      java.util.regex.Matcher m = p.matcher(Files.readString(log));
      if (m.find()) return java.net.URI.create("http://127.0.0.1:" + m.group(1));
      Thread.sleep(50);
    }
    fail("the server did not report its HTTP port:\n" + logText());
    return null;
  }

  String logText() {
    try {
      return Files.readString(log, StandardCharsets.UTF_8);
    } catch (IOException e) {
      return "(no log: " + e + ")";
    }
  }

  /** Every process of the job (timeout, mpirun, the ranks), children first. */
  private List<ProcessHandle> job() {
    List<ProcessHandle> all = new ArrayList<>();
    process.toHandle().descendants().forEach(all::add);
    all.add(process.toHandle());
    return all;
  }

  /** SIGKILL to the whole job at once, as a crash would: no drain, no goodbye on the socket. */
  void killJob() throws InterruptedException {
    List<ProcessHandle> job = job();
    for (ProcessHandle p : job) p.destroyForcibly();
    // Returns when every process of the job is gone (its sockets closed), not merely signalled.
    for (ProcessHandle p : job) {
      try {
        p.onExit().get(10, TimeUnit.SECONDS);
      } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
        fail("process " + p.pid() + " of the job survived SIGKILL for 10 s");
      }
    }
    process.waitFor(10, TimeUnit.SECONDS);
  }

  /**
   * SIGINT to mpirun alone (it forwards it to every rank, which drain and exit 0). A signal to the
   * process group would reach mpirun twice, through `timeout`, and a second SIGINT kills the job.
   */
  boolean stop() throws IOException, InterruptedException {
    if (!process.isAlive()) return true;
    List<ProcessHandle> children = process.toHandle().children().toList();  // mpirun
    for (ProcessHandle mpirun : children) {
      new ProcessBuilder("kill", "-INT", Long.toString(mpirun.pid())).inheritIO().start().waitFor();
    }
    return process.waitFor(30, TimeUnit.SECONDS);
  }

  @Override
  public void close() throws IOException {
    try {
      if (!stop()) killJob();
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      for (ProcessHandle p : job()) p.destroyForcibly();
    }
  }

  // ---- helpers shared by the tests ---------------------------------------------------------------

  /** The engine's health, through a fresh connection. */
  Map<String, Object> health() {
    try (Llama2Client c = Llama2Client.connect(socket)) {
      return c.health();
    }
  }

  /** Waits until nothing runs or waits and every KV block is free; false after `timeout`. */
  boolean awaitIdle(Duration timeout) throws InterruptedException {
    return await(timeout, () -> {
      Map<String, Object> h = health();
      return Json.num(h, "running", -1) == 0 && Json.num(h, "queued", -1) == 0
          && Json.num(h, "kv_blocks_used", -1) == 0;
    });
  }

  /** Polls `cond` every 20 ms until it holds or `timeout` passes. */
  static boolean await(Duration timeout, BooleanSupplier cond) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    do {
      if (cond.getAsBoolean()) return true;
      Thread.sleep(20);
    } while (System.nanoTime() < deadline);
    return cond.getAsBoolean();
  }

  /** `llama2 generate --json` (2 ranks) with the same prompt and parameters: the reference. */
  static Map<String, Object> cliGenerate(String model, String prompt, GenerationParams p)
      throws IOException, InterruptedException {
    List<String> cmd = new ArrayList<>(List.of(MPIRUN, "2", BINARY, "generate", "--model", model,
        "--prompt", prompt, "--json", "--quiet",
        "--temperature", Double.toString(p.temperature()), "--top-p", Double.toString(p.topP()),
        "--top-k", Integer.toString(p.topK()),
        "--repetition-penalty", Double.toString(p.repetitionPenalty()),
        "--presence-penalty", Double.toString(p.presencePenalty()),
        "--frequency-penalty", Double.toString(p.frequencyPenalty()),
        "-n", Integer.toString(p.maxNewTokens())));
    if (p.seed() != null) cmd.addAll(List.of("--seed", Long.toUnsignedString(p.seed())));
    for (String s : p.stop()) cmd.addAll(List.of("--stop", s));
    if (p.ignoreEos()) cmd.add("--ignore-eos");
    File out = File.createTempFile("llama2-cli", ".json");
    try {
      Process proc = new ProcessBuilder(cmd).redirectOutput(out)
          .redirectError(ProcessBuilder.Redirect.DISCARD).start();
      if (!proc.waitFor(60, TimeUnit.SECONDS)) {
        proc.destroyForcibly();
        fail("llama2 generate did not finish: " + cmd);
      }
      String json = Files.readString(out.toPath(), StandardCharsets.UTF_8);
      if (proc.exitValue() != 0) fail("llama2 generate exited " + proc.exitValue() + ": " + json);
      return Json.parseObject(json.trim());
    } finally {
      out.delete();
    }
  }
}
