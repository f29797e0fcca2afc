package org.apache.spark.shuffle.ushuffle

import org.apache.spark.SparkEnv
import org.apache.spark.scheduler.MapStatus
import org.apache.spark.shuffle.FetchFailedException
import org.apache.spark.storage.BlockManagerId

/** Spark's private[spark] pieces the Java classes use, in one place. */
private[ushuffle] object SparkGlue {
  /**
   * Where Spark's tracker records a ushuffle map output: not the executor
   * that wrote it (its loss loses nothing, the data is on the workers) but
   * one location for every map output on the workers. A FetchFailed naming
   * it makes the DAGScheduler unregister every output there, and rerun the
   * maps: losing a worker with one replica loses a share of every map,
   * since partitions are spread over all workers.
   */
  val ExecutorId = "ushuffle-workers"

  def location(): BlockManagerId = {
    val own = SparkEnv.get.blockManager.shuffleServerId
    BlockManagerId(ExecutorId, own.host, own.port, None)
  }

  def mapStatus(lengths: Array[Long], mapId: Long): MapStatus =
    MapStatus(location(), lengths, mapId)

  def fetchFailed(loc: BlockManagerId, shuffleId: Int, mapId: Long, mapIndex: Int,
      reduceId: Int, cause: Throwable): FetchFailedException =
    new FetchFailedException(loc, shuffleId, mapId, mapIndex, reduceId,
      s"ushuffle: ${cause.getMessage}", cause)
}
