package org.apache.spark.shuffle.ushuffle;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.List;

/**
 * The JNI half (spark/src/main/native/ushuffle_jni.c) and its one loader.
 * The jar carries libushuffle_jni.so with the libushuffle and
 * libushuffle_worker it links, under native/linux-x86_64/; they are
 * extracted together into one private folder once per JVM and loaded from
 * there (the JNI library finds the other two beside it). Failures throw
 * UShuffleException; handles are owned as the C file says.
 */
final class Native {
  private static final String DIR = "native/linux-x86_64/";
  private static volatile String loadError;
  private static volatile boolean loaded;

  private Native() {}

  /** Loads the native libraries, or throws once per call with the same
   *  one-line cause (a missing library, a missing system dependency). */
  static synchronized void load() {
    if (loaded) return;
    if (loadError == null) loadError = tryLoad(Native.class.getClassLoader());
    if (loadError != null) throw new UnsatisfiedLinkError(loadError);
    loaded = true;
  }

  /** Extracts the libraries that loader's native.list names and loads
   *  them: null, or what went wrong in one line. */
  static String tryLoad(ClassLoader loader) {
    try {
      Path dir = Files.createTempDirectory("ushuffle-native");
      dir.toFile().deleteOnExit();
      List<String> names = new ArrayList<>();
      try (InputStream in = resource(loader, "native.list");
           BufferedReader r = new BufferedReader(
               new InputStreamReader(in, StandardCharsets.UTF_8))) {
        for (String l; (l = r.readLine()) != null; )
          if (!l.isBlank()) names.add(l.trim());
      }
      Path jni = null;
      for (String n : names) {
        Path p = dir.resolve(n);
        try (InputStream in = resource(loader, n)) {
          Files.copy(in, p, StandardCopyOption.REPLACE_EXISTING);
        }
        p.toFile().deleteOnExit();
        jni = p;
      }
      if (jni == null) throw new IOException(DIR + "native.list names no library");
      System.load(jni.toString());
      return null;
    } catch (IOException | UnsatisfiedLinkError | RuntimeException e) {
      return "ushuffle: cannot load its native library (" + e.getMessage()
          + "); the jar carries it for Linux x86-64 and needs liburing2, liblz4-1,"
          + " libzstd1, libisal2 and libssl3 installed";
    }
  }

  private static InputStream resource(ClassLoader loader, String name) throws IOException {
    InputStream in = loader.getResourceAsStream(DIR + name);
    if (in == null)
      throw new IOException(DIR + name + " is not in the ushuffle-spark jar");
    return in;
  }

  static native String version();

  static native void authSecret(String app, byte[] secret) throws UShuffleException;

  // writer: a ring and a net writer, owned by the task thread that opened them
  static native long writerOpen(int shuffle, int map, int attempt, int partitions,
      String workers, String app, int replicas, String codec, long poolBytes,
      long pushSize, int timeoutMs, int ioengine, String sealKeyFile)
      throws UShuffleException;

  static native ByteBuffer acquire(long w) throws UShuffleException;

  static native ByteBuffer swap(long w, int partition, ByteBuffer buf, int len,
      int records) throws UShuffleException;

  static native void release(long w, ByteBuffer buf) throws UShuffleException;

  static native void writeRecord(long w, int partition, byte[] rec, int off, int len)
      throws UShuffleException;

  /** Commits; fills bytes[] with each partition's record bytes; returns
   *  the map status. */
  static native byte[] commit(long w, long[] bytes) throws UShuffleException;

  static native long writerStoredBytes(long w);

  static native void writerFree(long w);

  // reader
  static native long readerOpen(byte[][] statuses, int partition, int npartitions,
      int timeoutMs, String sealKeyFile) throws UShuffleException;

  static native ByteBuffer readerNext(long r) throws UShuffleException;

  static native long[] readerStats(long r);

  static native void readerFree(long r);

  // lifetimes on the workers
  static native void heartbeat(String workers, String app) throws UShuffleException;

  static native void drop(String workers, String app, int shuffle) throws UShuffleException;

  static native int workersCheck(String workers) throws UShuffleException;

  // a worker in this process
  static native long workerStart(String listen, String dir, byte[] secret, int threads)
      throws UShuffleException;

  static native int workerPort(long w);

  static native void workerStop(long w);
}
