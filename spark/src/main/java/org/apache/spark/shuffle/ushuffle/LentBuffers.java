package org.apache.spark.shuffle.ushuffle;

import java.lang.reflect.Field;
import java.nio.Buffer;
import java.nio.ByteBuffer;

import sun.misc.Unsafe;

/**
 * The push buffers a writer holds, one per partition that has records:
 * direct ByteBuffers over the ring's registered memory, lent by
 * ush_writer_acquire() and handed back by ush_writer_swap(). Each holds one
 * ushuffle record, a chunk of the partition's serialized records that
 * decodes alone: a 4-byte little-endian length, then the bytes.
 *
 * A swapped buffer is in flight: its ByteBuffer is emptied (limit 0), so a
 * late put() through a stale reference throws BufferOverflowException and
 * never reaches the frame. The ByteBuffers never leave this package.
 */
final class LentBuffers {
  static final int HDR = 4;
  private static final Unsafe UNSAFE;
  private static final long ADDRESS;

  static {
    try {
      Field f = Unsafe.class.getDeclaredField("theUnsafe");
      f.setAccessible(true);
      UNSAFE = (Unsafe) f.get(null);
      ADDRESS = UNSAFE.objectFieldOffset(Buffer.class.getDeclaredField("address"));
    } catch (ReflectiveOperationException e) {
      throw new ExceptionInInitializerError(e);
    }
  }

  private final long w;
  private final ByteBuffer[] bufs;
  private final long[] addrs;
  private final int[] records; // Spark records in each partition's chunk
  private long nanos;

  LentBuffers(long writer, int partitions) {
    w = writer;
    bufs = new ByteBuffer[partitions];
    addrs = new long[partitions];
    records = new int[partitions];
  }

  /** Partition p's buffer, lent on first use; its position is where the
   *  next record goes. */
  ByteBuffer get(int p) throws UShuffleException {
    ByteBuffer b = bufs[p];
    if (b == null) {
      long t0 = System.nanoTime();
      b = Native.acquire(w);
      nanos += System.nanoTime() - t0;
      lend(p, b);
    }
    return b;
  }

  /** Native address of the byte at b's position (b is partition p's). */
  long address(int p) {
    return addrs[p] + bufs[p].position();
  }

  void counted(int p) {
    records[p]++;
  }

  /** True when partition p's chunk holds a record. */
  boolean started(int p) {
    return records[p] > 0;
  }

  /** Hands partition p's chunk over and lends a fresh buffer in its place. */
  void swap(int p) throws UShuffleException {
    ByteBuffer b = bufs[p];
    int len = b.position();
    b.putInt(0, Integer.reverseBytes(len - HDR));
    long t0 = System.nanoTime();
    ByteBuffer n = Native.swap(w, p, b, len, 1);
    nanos += System.nanoTime() - t0;
    invalidate(b);
    lend(p, n);
  }

  /** Hands every started chunk over and gives every buffer back. */
  void finish() throws UShuffleException {
    for (int p = 0; p < bufs.length; p++) {
      if (bufs[p] == null) continue;
      if (started(p)) swap(p);
      ByteBuffer b = bufs[p];
      bufs[p] = null;
      invalidate(b);
      Native.release(w, b);
    }
  }

  /** Undoes a record that did not fit: back to where it began. */
  void rewind(int p, int position) {
    bufs[p].position(position);
  }

  /** Nanoseconds spent in the native calls (Spark's shuffle write time). */
  long nanos() {
    return nanos;
  }

  private void lend(int p, ByteBuffer b) {
    bufs[p] = b;
    addrs[p] = UNSAFE.getLong(b, ADDRESS);
    records[p] = 0;
    b.position(HDR);
  }

  private static void invalidate(ByteBuffer b) {
    b.position(0);
    b.limit(0);
  }
}
