package org.apache.spark.shuffle.ushuffle;

import java.io.IOException;
import java.lang.reflect.Field;
import java.nio.ByteBuffer;

import org.apache.spark.serializer.Serializer;
import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.sql.execution.metric.SQLMetric;
import org.apache.spark.unsafe.Platform;

/** Spark SQL's rows written as bytes (apart from UShuffleWriter so that a
 *  job without Spark SQL on its classpath never loads UnsafeRow). */
final class Rows {
  private static final Field DATA_SIZE;

  static {
    Field f = null;
    try {
      f = Class.forName("org.apache.spark.sql.execution.UnsafeRowSerializer")
          .getDeclaredField("dataSize");
      f.setAccessible(true);
    } catch (ReflectiveOperationException | RuntimeException e) {
      // another Spark: the exchange's data size stays unreported
    }
    DATA_SIZE = f;
  }

  private Rows() {}

  /** Writes one row into partition p's buffer (alone, through the copy
   *  path, when it is larger than a buffer); returns the row's size. */
  static int write(LentBuffers bufs, long w, int p, Object value) throws IOException {
    UnsafeRow row = (UnsafeRow) value;
    int size = row.getSizeInBytes();
    ByteBuffer b = bufs.get(p);
    if (4 + size > b.capacity() - LentBuffers.HDR) {
      byte[] rec = new byte[4 + size];
      ByteBuffer.wrap(rec).putInt(size);
      Platform.copyMemory(row.getBaseObject(), row.getBaseOffset(), rec,
          Platform.BYTE_ARRAY_OFFSET + 4, size);
      Native.writeRecord(w, p, rec, 0, rec.length);
      return size;
    }
    if (b.remaining() < 4 + size) {
      bufs.swap(p);
      b = bufs.get(p);
    }
    b.putInt(size);
    Platform.copyMemory(row.getBaseObject(), row.getBaseOffset(), null, bufs.address(p), size);
    b.position(b.position() + size);
    bufs.counted(p);
    return size;
  }

  /**
   * Adds the rows' bytes to the exchange's "data size" metric, which
   * UnsafeRowSerializer counts as it serializes, and these rows bypass. AQE
   * takes a stage's size from it: without it every ushuffle exchange would
   * read as empty, and AQE would broadcast either side of any join.
   */
  static void addDataSize(Serializer serializer, long bytes) {
    if (DATA_SIZE == null) return;
    try {
      SQLMetric m = (SQLMetric) DATA_SIZE.get(serializer);
      if (m != null) m.add(bytes);
    } catch (IllegalAccessException e) {
      throw new IllegalStateException(e);
    }
  }
}
