package org.apache.spark.shuffle.ushuffle;

import java.io.IOException;
import java.nio.ByteBuffer;

import org.apache.spark.sql.catalyst.expressions.UnsafeRow;
import org.apache.spark.unsafe.Platform;

/** Spark SQL's rows written as bytes (apart from UShuffleWriter so that a
 *  job without Spark SQL on its classpath never loads UnsafeRow). */
final class Rows {
  private Rows() {}

  static void write(LentBuffers bufs, long w, int p, Object value) throws IOException {
    UnsafeRow row = (UnsafeRow) value;
    int size = row.getSizeInBytes();
    ByteBuffer b = bufs.get(p);
    if (b.remaining() < 4 + size && bufs.started(p)) {
      bufs.swap(p);
      b = bufs.get(p);
    }
    if (b.remaining() < 4 + size) { // larger than a buffer: alone
      byte[] rec = new byte[4 + size];
      ByteBuffer.wrap(rec).putInt(size);
      Platform.copyMemory(row.getBaseObject(), row.getBaseOffset(), rec,
          Platform.BYTE_ARRAY_OFFSET + 4, size);
      Native.writeRecord(w, p, rec, 0, rec.length);
      return;
    }
    b.putInt(size);
    Platform.copyMemory(row.getBaseObject(), row.getBaseOffset(), null, bufs.address(p), size);
    b.position(b.position() + size);
    bufs.counted(p);
  }
}
