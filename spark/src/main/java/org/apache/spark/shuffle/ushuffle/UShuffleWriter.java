package org.apache.spark.shuffle.ushuffle;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.ByteBuffer;

import scala.Option;
import scala.Product2;
import scala.collection.Iterator;
import scala.reflect.ClassTag;
import scala.reflect.ClassTag$;

import org.apache.spark.Partitioner;
import org.apache.spark.ShuffleDependency;
import org.apache.spark.TaskContext;
import org.apache.spark.scheduler.MapStatus;
import org.apache.spark.serializer.SerializationStream;
import org.apache.spark.serializer.Serializer;
import org.apache.spark.serializer.SerializerInstance;
import org.apache.spark.shuffle.BaseShuffleHandle;
import org.apache.spark.shuffle.ShuffleWriteMetricsReporter;
import org.apache.spark.shuffle.ShuffleWriter;

/**
 * A map task's writer: records are serialized by one SerializerInstance
 * straight into their partition's push buffer (LentBuffers), a full buffer
 * is swapped for an idle one, and commit publishes the map output on the
 * workers. One JNI call per buffer, none per record.
 *
 * A chunk (one buffer's records) must decode alone, in any order with the
 * others. A serializer whose records are relocatable (Kryo with auto-reset,
 * Spark SQL's rows) writes every partition through one stream; any other
 * (Java serialization) gets a stream per chunk, started in the chunk, so
 * its back-references never cross chunks. A record that does not fit is
 * undone and written again into a fresh buffer; one larger than a buffer
 * goes out alone through the copy path. Spark SQL's UnsafeRows are copied
 * as bytes in the format of its serializer, not serialized.
 *
 * Owned by the task thread: open, writes, commit and free all run there
 * (the ring is single-issuer).
 */
final class UShuffleWriter<K, V, C> extends ShuffleWriter<K, V> {
  private static final ClassTag<Object> OBJECT = ClassTag$.MODULE$.Any();
  private static final String UNSAFE_ROW_SERIALIZER =
      "org.apache.spark.sql.execution.UnsafeRowSerializer";

  private final UShuffleManager mgr;
  private final ShuffleDependency<K, V, C> dep;
  private final int shuffleId;
  private final long mapId;
  private final TaskContext context;
  private final ShuffleWriteMetricsReporter metrics;
  private final Partitioner partitioner;
  private final int partitions;
  private long w; // the native writer; 0 once freed
  private MapStatus mapStatus;
  private long[] lengths;

  UShuffleWriter(UShuffleManager mgr, BaseShuffleHandle<K, V, C> handle, long mapId,
      TaskContext context, ShuffleWriteMetricsReporter metrics) {
    this.mgr = mgr;
    this.dep = handle.dependency();
    this.shuffleId = handle.shuffleId();
    this.mapId = mapId;
    this.context = context;
    this.metrics = metrics;
    this.partitioner = dep.partitioner();
    this.partitions = partitioner.numPartitions();
  }

  /** Opens the native writer on the thread that writes (the ring is bound
   *  to it), which need not be the one that made this object. */
  private void open() throws IOException {
    UShuffleConf c = mgr.conf();
    // Attempts are told apart by Spark's task attempt id (its mapId since
    // 3.0), unique in the application: speculative copies and stage
    // retries of one map are distinct ushuffle attempts.
    w = Native.writerOpen(shuffleId, context.partitionId(), (int) context.taskAttemptId(),
        partitions, mgr.workers(), mgr.app(), c.replicas, c.codec, c.poolBytes(partitions),
        c.pushSize(partitions), c.timeoutMs, c.ioengine, c.sealKeyFile);
    context.addTaskCompletionListener(
        (org.apache.spark.util.TaskCompletionListener) ctx -> free());
  }

  @Override
  @SuppressWarnings("unchecked")
  public void write(Iterator<Product2<K, V>> records) throws IOException {
    Iterator<? extends Product2<K, ?>> in = records;
    if (dep.mapSideCombine()) {
      in = dep.aggregator().get().combineValuesByKey(
          (Iterator<Product2<K, V>>) (Iterator<?>) records, context);
    }
    lengths = new long[partitions];
    if (!in.hasNext()) { // nothing to write: no ring, no connection
      mapStatus = SparkGlue.mapStatus(shuffleId, lengths, mapId);
      return;
    }
    open();
    LentBuffers bufs = new LentBuffers(w, partitions);
    Sink sink = sink(dep.serializer(), bufs);
    long n = 0;
    while (in.hasNext()) {
      Product2<K, ?> r = in.next();
      int p = partitioner.getPartition(r._1());
      sink.write(p, r._1(), r._2());
      n++;
    }
    sink.close();
    bufs.finish();
    long t0 = System.nanoTime();
    byte[] status = Native.commit(w, lengths);
    StatusTracker.register(shuffleId, mapId, status);
    metrics.incWriteTime(bufs.nanos() + System.nanoTime() - t0);
    metrics.incRecordsWritten(n);
    metrics.incBytesWritten(Native.writerStoredBytes(w));
    mapStatus = SparkGlue.mapStatus(shuffleId, lengths, mapId);
  }

  @Override
  public Option<MapStatus> stop(boolean success) {
    try {
      return success && mapStatus != null ? Option.apply(mapStatus) : Option.empty();
    } finally {
      free();
    }
  }

  @Override
  public long[] getPartitionLengths() {
    return lengths;
  }

  /** Frees the writer, which aborts it if it did not commit. */
  private void free() {
    if (w != 0) {
      Native.writerFree(w);
      w = 0;
    }
  }

  private Sink sink(Serializer s, LentBuffers bufs) {
    if (s.getClass().getName().equals(UNSAFE_ROW_SERIALIZER)) return new RowSink(s, bufs, w);
    SerializerInstance si = s.newInstance();
    return s.supportsRelocationOfSerializedObjects()
        ? new SharedStreamSink(si, bufs, w) : new ChunkStreamSink(si, bufs, w, partitions);
  }

  /** Where a sink's records go. */
  interface Sink {
    void write(int p, Object key, Object value) throws IOException;

    /** After the last record. */
    default void close() {}
  }

  /**
   * The OutputStream serializers write to: partition p's buffer while the
   * record fits. A record that does not is dropped whole (every write after
   * the first that did not fit too) and marked, for the sink to undo.
   */
  static final class Target extends OutputStream {
    private ByteBuffer b;
    boolean overflow;

    void to(ByteBuffer buf) {
      b = buf;
      overflow = false;
    }

    @Override
    public void write(int v) {
      if (!overflow && b.hasRemaining()) b.put((byte) v);
      else overflow = true;
    }

    @Override
    public void write(byte[] src, int off, int len) {
      if (!overflow && len <= b.remaining()) b.put(src, off, len);
      else overflow = true;
    }
  }

  /** A record alone, serialized on the heap by a fresh stream, through
   *  the copy path (larger than a push buffer). */
  static void writeAlone(long w, SerializerInstance si, int p, Object k, Object v)
      throws IOException {
    ByteArrayOutputStream heap = new ByteArrayOutputStream();
    SerializationStream s = si.serializeStream(heap);
    s.writeKey(k, OBJECT);
    s.writeValue(v, OBJECT);
    s.close();
    Native.writeRecord(w, p, heap.toByteArray(), 0, heap.size());
  }

  /** Relocatable records: one stream for every partition. */
  static final class SharedStreamSink implements Sink {
    private final SerializerInstance si;
    private final LentBuffers bufs;
    private final long w;
    private final Target out = new Target();
    private final SerializationStream s;

    SharedStreamSink(SerializerInstance si, LentBuffers bufs, long w) {
      this.si = si;
      this.bufs = bufs;
      this.w = w;
      out.to(ByteBuffer.allocate(0));
      this.s = si.serializeStream(out);
    }

    @Override
    public void write(int p, Object k, Object v) throws IOException {
      for (int tries = 0; tries < 2; tries++) {
        ByteBuffer b = bufs.get(p);
        int start = b.position();
        out.to(b);
        s.writeKey(k, OBJECT);
        s.writeValue(v, OBJECT);
        s.flush();
        if (!out.overflow) {
          bufs.counted(p);
          return;
        }
        bufs.rewind(p, start);
        if (!bufs.started(p)) break; // it does not fit an empty buffer
        bufs.swap(p);
      }
      writeAlone(w, si, p, k, v);
    }
  }

  /** Records that are not relocatable: a stream per chunk, started at the
   *  chunk's head, so a chunk decodes alone. */
  static final class ChunkStreamSink implements Sink {
    private final SerializerInstance si;
    private final LentBuffers bufs;
    private final long w;
    private final Target out = new Target();
    private final SerializationStream[] streams;

    ChunkStreamSink(SerializerInstance si, LentBuffers bufs, long w, int partitions) {
      this.si = si;
      this.bufs = bufs;
      this.w = w;
      this.streams = new SerializationStream[partitions];
    }

    @Override
    public void write(int p, Object k, Object v) throws IOException {
      for (int tries = 0; tries < 2; tries++) {
        ByteBuffer b = bufs.get(p);
        out.to(b);
        if (streams[p] == null) streams[p] = si.serializeStream(out);
        int start = b.position();
        SerializationStream s = streams[p];
        s.writeKey(k, OBJECT);
        s.writeValue(v, OBJECT);
        s.flush();
        if (!out.overflow) {
          bufs.counted(p);
          return;
        }
        // The stream has seen the record: it cannot go on in this chunk.
        streams[p] = null;
        bufs.rewind(p, start);
        if (!bufs.started(p)) {
          bufs.rewind(p, LentBuffers.HDR); // drop the stream's header too
          break;
        }
        bufs.swap(p);
      }
      writeAlone(w, si, p, k, v);
    }
  }

  /** Spark SQL's UnsafeRows, as UnsafeRowSerializer lays them out (a
   *  big-endian size, then the row's bytes), copied once into the buffer. */
  static final class RowSink implements Sink {
    private final Serializer serializer;
    private final LentBuffers bufs;
    private final long w;
    private long bytes;

    RowSink(Serializer serializer, LentBuffers bufs, long w) {
      this.serializer = serializer;
      this.bufs = bufs;
      this.w = w;
    }

    @Override
    public void write(int p, Object k, Object v) throws IOException {
      bytes += Rows.write(bufs, w, p, v);
    }

    @Override
    public void close() {
      Rows.addDataSize(serializer, bytes);
    }
  }
}
