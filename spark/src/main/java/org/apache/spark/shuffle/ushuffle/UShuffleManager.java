package org.apache.spark.shuffle.ushuffle;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.SecureRandom;
import java.util.HexFormat;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import org.apache.spark.ShuffleDependency;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.TaskContext;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleBlockResolver;
import org.apache.spark.shuffle.ShuffleHandle;
import org.apache.spark.shuffle.ShuffleManager;
import org.apache.spark.shuffle.ShuffleReadMetricsReporter;
import org.apache.spark.shuffle.ShuffleReader;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;

/**
 * Spark's shuffle on ushuffle (spark.shuffle.manager =
 * org.apache.spark.shuffle.ushuffle.UShuffleManager): map tasks push their
 * partitions to ushuffled workers through libushuffle, reduce tasks fetch
 * them back. The driver keeps each attempt's ushuffle status (StatusTracker)
 * while Spark's MapOutputTracker decides which attempt counts; the driver
 * heartbeats the application to the workers and drops each shuffle Spark
 * unregisters. With no spark.ushuffle.workers the driver runs a worker in
 * its own process, on loopback, for local and local-cluster runs.
 */
public class UShuffleManager implements ShuffleManager {
  private static final Logger LOG = LoggerFactory.getLogger(UShuffleManager.class);

  private final SparkConf sparkConf;
  private final boolean isDriver;
  private final UShuffleConf conf;
  private final ShuffleBlockResolver resolver = new NoBlockResolver();
  private final Set<Integer> shuffles = ConcurrentHashMap.newKeySet();
  private volatile String workers;
  private volatile String app;
  private volatile boolean authed;
  private long embedded; // the driver's own worker, or 0
  private Path embeddedDir;
  private ScheduledExecutorService heartbeats;

  public UShuffleManager(SparkConf sparkConf, boolean isDriver) {
    SparkVersion.check(org.apache.spark.package$.MODULE$.SPARK_VERSION());
    this.sparkConf = sparkConf;
    this.isDriver = isDriver;
    this.conf = new UShuffleConf(sparkConf);
    if (sparkConf.getBoolean("spark.shuffle.useOldFetchProtocol", false)) {
      // Spark then names map outputs by map index, not by task attempt:
      // readers could not tell which attempt the tracker chose.
      throw new IllegalArgumentException("ushuffle: spark.shuffle.useOldFetchProtocol=true "
          + "is not supported (map outputs must be named by task attempt)");
    }
    this.workers = conf.workers;
    if (isDriver && workers == null) embed();
  }

  public UShuffleManager(SparkConf sparkConf) {
    this(sparkConf, "driver".equals(sparkConf.get("spark.executor.id", "driver")));
  }

  UShuffleConf conf() {
    return conf;
  }

  /** The worker list, checked once; the application's secret set before
   *  any connection. */
  String workers() throws UShuffleException {
    if (!authed) {
      synchronized (this) {
        if (!authed) {
          Native.load();
          if (workers == null) workers = sparkConf.get(UShuffleConf.WORKERS, "").trim();
          if (workers.isEmpty()) {
            throw new IllegalStateException("ushuffle: no " + UShuffleConf.WORKERS
                + " on this executor (set it, or leave it unset on the driver to run one there)");
          }
          Native.workersCheck(workers);
          byte[] secret = UShuffleConf.secret(sparkConf);
          if (secret != null) Native.authSecret(null, secret);
          authed = true;
        }
      }
    }
    return workers;
  }

  String app() {
    if (app == null) app = UShuffleConf.appId(sparkConf);
    return app;
  }

  /** Starts a worker in the driver's process on loopback, with a fresh
   *  secret, and names both in the SparkConf that executors fetch: for
   *  local and local-cluster masters, whose executors share the host. */
  private void embed() {
    String master = sparkConf.get("spark.master", "local");
    if (!master.startsWith("local")) {
      throw new IllegalArgumentException("ushuffle: no " + UShuffleConf.WORKERS + " for master "
          + master + ": the driver runs a worker itself only for local and local-cluster "
          + "masters, whose executors reach its loopback address");
    }
    Native.load();
    try {
      Path base = Paths.get(sparkConf.get(UShuffleConf.WORKER_DIR,
          System.getProperty("java.io.tmpdir")));
      Files.createDirectories(base);
      embeddedDir = Files.createTempDirectory(base, "ushuffled-");
      byte[] secret = UShuffleConf.secret(sparkConf);
      if (secret == null) {
        byte[] raw = new byte[32];
        new SecureRandom().nextBytes(raw);
        String hex = HexFormat.of().formatHex(raw);
        sparkConf.set(UShuffleConf.SECRET, hex);
        secret = hex.getBytes(StandardCharsets.UTF_8);
      }
      int threads = sparkConf.getInt(UShuffleConf.WORKER_THREADS, 0);
      embedded = Native.workerStart("127.0.0.1:0", embeddedDir.toString(), secret, threads);
      workers = "127.0.0.1:" + Native.workerPort(embedded);
      sparkConf.set(UShuffleConf.WORKERS, workers);
      LOG.info("ushuffle: started a worker in the driver at {} storing in {}", workers,
          embeddedDir);
    } catch (IOException e) {
      throw new UncheckedIOException("ushuffle: cannot start the driver's worker", e);
    }
  }

  @Override
  public <K, V, C> ShuffleHandle registerShuffle(int shuffleId,
      ShuffleDependency<K, V, C> dependency) {
    if (isDriver) {
      StatusTracker.serve(SparkEnv.get());
      startHeartbeats();
      shuffles.add(shuffleId);
    }
    return new BaseShuffleHandle<>(shuffleId, dependency);
  }

  private synchronized void startHeartbeats() {
    if (heartbeats != null) return;
    heartbeats = Executors.newSingleThreadScheduledExecutor(r -> {
      Thread t = new Thread(r, "ushuffle-heartbeat");
      t.setDaemon(true);
      return t;
    });
    heartbeats.scheduleWithFixedDelay(() -> {
      try {
        Native.heartbeat(workers(), app());
      } catch (Throwable e) {
        LOG.warn("ushuffle: heartbeat failed: {}", e.getMessage());
      }
    }, 0, conf.heartbeatMs, TimeUnit.MILLISECONDS);
  }

  @Override
  @SuppressWarnings("unchecked")
  public <K, V> ShuffleWriter<K, V> getWriter(ShuffleHandle handle, long mapId,
      TaskContext context, ShuffleWriteMetricsReporter metrics) {
    try {
      workers();
      return new UShuffleWriter<>(this, (BaseShuffleHandle<K, V, ?>) handle, mapId,
          context, metrics);
    } catch (IOException e) {
      throw new UncheckedIOException(e.getMessage(), e);
    }
  }

  @Override
  @SuppressWarnings("unchecked")
  public <K, C> ShuffleReader<K, C> getReader(ShuffleHandle handle, int startMapIndex,
      int endMapIndex, int startPartition, int endPartition, TaskContext context,
      ShuffleReadMetricsReporter metrics) {
    try {
      workers();
    } catch (IOException e) {
      throw new UncheckedIOException(e.getMessage(), e);
    }
    return new UShuffleReader<>((BaseShuffleHandle<K, ?, C>) handle, startMapIndex,
        endMapIndex, startPartition, endPartition, context, metrics, conf);
  }

  @Override
  public boolean unregisterShuffle(int shuffleId) {
    StatusTracker.forget(shuffleId, isDriver);
    if (isDriver && shuffles.remove(shuffleId)) drop(shuffleId);
    return true;
  }

  /** Drops a shuffle on the workers; false (with a warning) when they did
   *  not confirm, and their --app-ttl will. */
  private boolean drop(int shuffleId) {
    try {
      Native.drop(workers(), app(), shuffleId);
      return true;
    } catch (Throwable e) {
      LOG.warn("ushuffle: dropping shuffle {} failed (the workers drop it when the "
          + "application's heartbeats stop): {}", shuffleId, e.getMessage());
      return false;
    }
  }

  @Override
  public ShuffleBlockResolver shuffleBlockResolver() {
    return resolver;
  }

  @Override
  public void stop() {
    if (isDriver) {
      // The first drop that fails leaves the rest to the workers' TTL: a
      // dead worker would hold stop() for a timeout per shuffle.
      for (Integer s : shuffles) if (!drop(s)) break;
      shuffles.clear();
      synchronized (this) {
        if (heartbeats != null) heartbeats.shutdownNow();
        heartbeats = null;
        if (embedded != 0) Native.workerStop(embedded);
        embedded = 0;
        if (embeddedDir != null) removeTree(embeddedDir);
        embeddedDir = null;
      }
    }
    StatusTracker.stop();
  }

  private static void removeTree(Path dir) {
    try (java.util.stream.Stream<Path> s = Files.walk(dir)) {
      s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
    } catch (IOException e) {
      LOG.warn("ushuffle: cannot remove {}: {}", dir, e.getMessage());
    }
  }
}
