package org.apache.spark.shuffle.ushuffle

import java.io.InputStream
import java.nio.ByteBuffer

import scala.collection.mutable

import org.apache.spark.{InterruptibleIterator, SparkEnv, TaskContext}
import org.apache.spark.shuffle.{BaseShuffleHandle, ShuffleReadMetricsReporter, ShuffleReader}
import org.apache.spark.storage.{BlockManagerId, ShuffleBlockId}
import org.apache.spark.util.CompletionIterator
import org.apache.spark.util.collection.ExternalSorter

/**
 * Reads partitions [startPartition, endPartition) of the map outputs
 * [startMapIndex, endMapIndex) that Spark's MapOutputTracker names — a
 * coalesced range (AQE) is one range read, a split skewed partition a subset
 * of maps. Each ushuffle record is a chunk of one partition's serialized
 * records that decodes alone (UShuffleWriter); a chunk is deserialized with
 * the writer's serializer, one stream per chunk, one instance per reader.
 */
private[ushuffle] class UShuffleReader[K, C](
    handle: BaseShuffleHandle[K, _, C],
    startMapIndex: Int,
    endMapIndex: Int,
    startPartition: Int,
    endPartition: Int,
    context: TaskContext,
    metrics: ShuffleReadMetricsReporter,
    conf: UShuffleConf)
  extends ShuffleReader[K, C] {

  private val dep = handle.dependency
  private val shuffleId = handle.shuffleId

  override def read(): Iterator[Product2[K, C]] = {
    // The attempts the tracker holds, with data in the range.
    val maps = mutable.LinkedHashMap[Long, (Int, BlockManagerId)]()
    SparkEnv.get.mapOutputTracker.getMapSizesByExecutorId(
      shuffleId, startMapIndex, endMapIndex, startPartition, endPartition).foreach {
      case (loc, blocks) => blocks.foreach {
        case (ShuffleBlockId(_, mapId, _), _, mapIndex) =>
          maps.getOrElseUpdate(mapId, (mapIndex, loc))
        case (other, _, _) =>
          throw new IllegalStateException(s"ushuffle: unexpected block $other")
      }
    }
    val chunks = new Chunks(maps.toArray)
    val ser = dep.serializer.newInstance()
    val records = chunks.flatMap { bb =>
      ser.deserializeStream(new ByteBufferStream(bb)).asKeyValueIterator
    }.map { r =>
      metrics.incRecordsRead(1)
      r
    }
    val done = CompletionIterator[(Any, Any), Iterator[(Any, Any)]](records, {
      chunks.close()
      context.taskMetrics().mergeShuffleReadMetrics()
    })
    context.addTaskCompletionListener[Unit](_ => chunks.close())
    val in = new InterruptibleIterator[(Any, Any)](context, done)

    val aggregated: Iterator[Product2[K, C]] = dep.aggregator match {
      case Some(agg) if dep.mapSideCombine =>
        agg.combineCombinersByKey(in.asInstanceOf[Iterator[(K, C)]], context)
      case Some(agg) =>
        agg.asInstanceOf[org.apache.spark.Aggregator[K, Any, C]]
          .combineValuesByKey(in.asInstanceOf[Iterator[(K, Any)]], context)
      case None => in.asInstanceOf[Iterator[Product2[K, C]]]
    }
    val out = dep.keyOrdering match {
      case Some(ord: Ordering[K]) =>
        val sorter = new ExternalSorter[K, C, C](context, ordering = Some(ord),
          serializer = dep.serializer)
        sorter.insertAllAndUpdateMetrics(aggregated)
      case None => aggregated
    }
    // The aggregator and sorter drained the interruptible input: a killed
    // task stops emitting their output too.
    out match {
      case i: InterruptibleIterator[Product2[K, C]] => i
      case _ => new InterruptibleIterator[Product2[K, C]](context, out)
    }
  }

  /**
   * The chunks of the range, map after map as the library yields them,
   * through one native reader at a time (a range is split where maps ×
   * partitions would pass the library's bound). A chunk is valid until the
   * next one is asked for. A read failure that a rerun of the maps can mend
   * (a worker gone, data not committed there, a corrupt frame) becomes a
   * FetchFailedException naming the first map, so Spark reruns the maps.
   */
  private class Chunks(maps: Array[(Long, (Int, BlockManagerId))])
    extends Iterator[ByteBuffer] {
    private val statuses: Array[Array[Byte]] =
      if (maps.isEmpty) Array.empty else guarded(StatusTracker.statuses(shuffleId, maps.map(_._1)))
    private val step = math.max(1, 699050 / math.max(1, maps.length))
    private var from = startPartition
    private var reader = 0L
    private var next0: ByteBuffer = _
    private var waitNanos = 0L
    private var counted = false

    override def hasNext: Boolean = {
      while (next0 == null && (reader != 0 || from < endPartition) && maps.nonEmpty) {
        if (reader == 0) {
          val n = math.min(step, endPartition - from)
          reader = guarded(Native.readerOpen(statuses, from, n, conf.timeoutMs, conf.sealKeyFile))
          from += n
        }
        next0 = guarded(Native.readerNext(reader))
        if (next0 == null) closeReader()
      }
      next0 != null
    }

    override def next(): ByteBuffer = {
      if (!hasNext) throw new NoSuchElementException
      val b = next0
      next0 = null
      b
    }

    /** Runs f, timing it as fetch wait; a failure a rerun of the maps can
     *  mend becomes a FetchFailedException naming the first map. */
    private def guarded[T](f: => T): T = {
      val t0 = System.nanoTime()
      try f catch {
        case e: UShuffleException if e.isFetchFailure => throw fetchFailed(e)
        case e: MissingStatusException => throw fetchFailed(e)
      } finally waitNanos += System.nanoTime() - t0
    }

    private def fetchFailed(e: Throwable) = {
      val (mapId, (mapIndex, loc)) = maps.head
      SparkGlue.fetchFailed(loc, shuffleId, mapId, mapIndex, startPartition, e)
    }

    private def closeReader(): Unit = if (reader != 0) {
      val st = Native.readerStats(reader)
      metrics.incRemoteBytesRead(st(2))
      if (!counted) metrics.incRemoteBlocksFetched(maps.length)
      counted = true
      Native.readerFree(reader)
      reader = 0
    }

    def close(): Unit = {
      next0 = null
      closeReader()
      metrics.incFetchWaitTime(waitNanos / 1000000)
      waitNanos = 0
    }
  }
}

/** An InputStream over a chunk lent by the native reader. */
private[ushuffle] final class ByteBufferStream(b: ByteBuffer) extends InputStream {
  override def read(): Int = if (b.hasRemaining) b.get() & 0xff else -1
  override def read(dst: Array[Byte], off: Int, len: Int): Int = {
    if (len == 0) return 0
    if (!b.hasRemaining) return -1
    val n = math.min(len, b.remaining())
    b.get(dst, off, n)
    n
  }
  override def available(): Int = b.remaining()
  override def skip(n: Long): Long = {
    val k = math.min(n, b.remaining().toLong).toInt
    b.position(b.position() + k)
    k
  }
}
