package org.apache.spark.shuffle.ushuffle

import org.apache.spark.scheduler.MapStatus
import org.apache.spark.shuffle.FetchFailedException
import org.apache.spark.storage.BlockManagerId

/** Spark's private[spark] pieces the Java classes use, in one place. */
private[ushuffle] object SparkGlue {
  /**
   * Where Spark's tracker records a ushuffle map output: not the executor
   * that wrote it (its loss loses nothing: the data is on the workers) but
   * a pseudo block manager of the shuffle's own, on a pseudo host. A
   * FetchFailed naming it makes the DAGScheduler unregister that shuffle's
   * outputs and rerun its maps — a lost worker with one replica loses a
   * share of every map, since partitions are spread over all workers — and
   * nothing of other shuffles; no executor or host loss touches it, and
   * reducers wait for no locality on a host that runs no executor.
   */
  def location(shuffleId: Int): BlockManagerId =
    BlockManagerId(s"ushuffle-s$shuffleId", s"ushuffle-s$shuffleId", 1, None)

  def mapStatus(shuffleId: Int, lengths: Array[Long], mapId: Long): MapStatus =
    MapStatus(location(shuffleId), lengths, mapId)

  def fetchFailed(loc: BlockManagerId, shuffleId: Int, mapId: Long, mapIndex: Int,
      reduceId: Int, cause: Throwable): FetchFailedException =
    new FetchFailedException(loc, shuffleId, mapId, mapIndex, reduceId,
      s"ushuffle: ${cause.getMessage}", cause)
}
