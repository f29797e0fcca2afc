package org.apache.spark.shuffle.ushuffle;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.io.IOException;

import org.apache.spark.SparkConf;

/**
 * The spark.ushuffle.* keys (docs/spark.md), read once per manager. Every
 * value reaches executors the way Spark's own settings do: executors fetch
 * the driver's SparkConf over its RPC connection when they register, so the
 * secret the driver makes for an embedded worker never lands on a command
 * line.
 */
final class UShuffleConf {
  static final String WORKERS = "spark.ushuffle.workers";
  static final String REPLICAS = "spark.ushuffle.replicas";
  static final String SECRET = "spark.ushuffle.secret";
  static final String SECRET_FILE = "spark.ushuffle.secret.file";
  static final String CODEC = "spark.ushuffle.codec";
  static final String SEAL_KEY_FILE = "spark.ushuffle.seal.keyFile";
  static final String BUFFER = "spark.ushuffle.buffer.size";
  static final String MEMORY = "spark.ushuffle.memory";
  static final String IO_ENGINE = "spark.ushuffle.io.engine";
  static final String TIMEOUT = "spark.ushuffle.io.timeout";
  static final String HEARTBEAT = "spark.ushuffle.heartbeat.interval";
  static final String WORKER_DIR = "spark.ushuffle.worker.dir";
  static final String WORKER_THREADS = "spark.ushuffle.worker.threads";

  final String workers; // null: none given (the driver embeds one)
  final int replicas;
  final String codec;
  final String sealKeyFile;
  final long pushMax;
  final long memory;
  final int ioengine; // 0 io_uring, 1 psync
  final int timeoutMs;
  final long heartbeatMs;

  UShuffleConf(SparkConf conf) {
    String w = conf.get(WORKERS, "").trim();
    workers = w.isEmpty() ? null : w;
    replicas = conf.getInt(REPLICAS, 1);
    if (replicas < 1 || replicas > 3)
      throw new IllegalArgumentException(REPLICAS + " is " + replicas + "; 1, 2 or 3");
    // spark.shuffle.compress=false turns compression off unless a codec is named.
    codec = conf.get(CODEC, conf.getBoolean("spark.shuffle.compress", true) ? "lz4" : "none");
    sealKeyFile = conf.get(SEAL_KEY_FILE, null);
    pushMax = conf.getSizeAsBytes(BUFFER, "64k");
    if (Long.bitCount(pushMax) != 1 || pushMax < 4096 || pushMax > (64L << 20))
      throw new IllegalArgumentException(BUFFER + " is " + pushMax
          + " bytes; a power of two from 4k to 64m");
    memory = conf.getSizeAsBytes(MEMORY, "64m");
    String e = conf.get(IO_ENGINE, "io_uring");
    if (e.equals("io_uring")) ioengine = 0;
    else if (e.equals("psync")) ioengine = 1;
    else throw new IllegalArgumentException(IO_ENGINE + " is '" + e + "'; io_uring or psync");
    timeoutMs = (int) conf.getTimeAsMs(TIMEOUT, "10s");
    heartbeatMs = conf.getTimeAsMs(HEARTBEAT, "30s");
  }

  /** The application's secret: spark.ushuffle.secret, else the file
   *  spark.ushuffle.secret.file names, else null (the library then reads
   *  $USHUFFLE_SECRET, or asks for no authentication). */
  static byte[] secret(SparkConf conf) {
    String s = conf.get(SECRET, null);
    if (s != null) return s.getBytes(StandardCharsets.UTF_8);
    String f = conf.get(SECRET_FILE, null);
    if (f == null) return null;
    try {
      String t = Files.readString(Paths.get(f), StandardCharsets.UTF_8);
      return (t.endsWith("\n") ? t.substring(0, t.length() - 1) : t)
          .getBytes(StandardCharsets.UTF_8);
    } catch (IOException ex) {
      throw new IllegalArgumentException(SECRET_FILE + ": cannot read " + f + ": " + ex, ex);
    }
  }

  /** ushuffle's application id for Spark's: the characters it allows,
   *  at most 64. */
  static String appId(SparkConf conf) {
    String id = conf.get("spark.app.id", "spark");
    StringBuilder b = new StringBuilder("spark-");
    for (int i = 0; i < id.length() && b.length() < 64; i++) {
      char c = id.charAt(i);
      boolean ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
          || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' || c == '-';
      b.append(ok ? c : '_');
    }
    return b.toString();
  }

  /** The push buffer size for a map of this many partitions: every
   *  partition holds one lent buffer, and those take at most half the
   *  writer's memory, from 4 KiB to spark.ushuffle.buffer.size. */
  long pushSize(int partitions) {
    long share = memory / 2 / Math.max(1, partitions);
    long p = Long.highestOneBit(Math.max(4096, share));
    return Math.min(pushMax, p);
  }

  /** The writer's registered memory: spark.ushuffle.memory, or more where
   *  the partitions' 4 KiB buffers need it (above 8,192 partitions at the
   *  64m default), at most 1 GiB. */
  long poolBytes(int partitions) {
    long need = 2L * partitions * pushSize(partitions);
    return Math.min(1L << 30, Math.max(memory, need));
  }
}
