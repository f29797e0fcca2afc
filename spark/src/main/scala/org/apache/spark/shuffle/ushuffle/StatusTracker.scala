package org.apache.spark.shuffle.ushuffle

import java.util.concurrent.ConcurrentHashMap

import org.apache.spark.SparkEnv
import org.apache.spark.rpc.{RpcCallContext, RpcEndpoint, RpcEndpointRef, RpcEnv}
import org.apache.spark.util.RpcUtils

/** A map attempt's ushuffle status, sent by its writer before the task
 *  reports success (so the driver holds it before the MapStatus). */
private[ushuffle] case class RegisterStatus(shuffleId: Int, mapId: Long, status: Array[Byte])
/** The statuses of these attempts (Spark's mapIds: task attempt ids). */
private[ushuffle] case class GetStatuses(shuffleId: Int, mapIds: Array[Long])
private[ushuffle] case class DropShuffle(shuffleId: Int)

/**
 * The driver's table of map statuses, by shuffle and task attempt id. It
 * elects nothing: Spark's MapOutputTracker keeps one MapStatus per map, and
 * readers ask here for exactly the attempts it names. Speculative and
 * retried attempts all register; the ones the tracker never names are
 * dropped with their shuffle.
 */
private[ushuffle] class StatusEndpoint(override val rpcEnv: RpcEnv)
  extends RpcEndpoint { // concurrent maps: no need to serialize the calls
  private val shuffles = new ConcurrentHashMap[Int, ConcurrentHashMap[Long, Array[Byte]]]()

  override def receiveAndReply(ctx: RpcCallContext): PartialFunction[Any, Unit] = {
    case RegisterStatus(shuffleId, mapId, status) =>
      shuffles.computeIfAbsent(shuffleId, _ => new ConcurrentHashMap()).put(mapId, status)
      ctx.reply(true)
    case GetStatuses(shuffleId, mapIds) =>
      val t = shuffles.get(shuffleId)
      ctx.reply(mapIds.map(id => if (t == null) null else t.get(id)))
    case DropShuffle(shuffleId) =>
      shuffles.remove(shuffleId)
      ctx.reply(true)
  }
}

/** Each JVM's way to the driver's table, with a cache of the statuses it
 *  fetched (an attempt's status never changes). */
private[ushuffle] object StatusTracker {
  val Name = "ushuffle-status"
  private val cache = new ConcurrentHashMap[Int, ConcurrentHashMap[Long, Array[Byte]]]()
  @volatile private var driver: RpcEndpointRef = _

  /** On the driver, once: serve the table. */
  def serve(env: SparkEnv): Unit = synchronized {
    if (driver == null) driver = env.rpcEnv.setupEndpoint(Name, new StatusEndpoint(env.rpcEnv))
  }

  private def ref(): RpcEndpointRef = {
    if (driver == null) synchronized {
      if (driver == null) {
        val env = SparkEnv.get
        driver = RpcUtils.makeDriverRef(Name, env.conf, env.rpcEnv)
      }
    }
    driver
  }

  def register(shuffleId: Int, mapId: Long, status: Array[Byte]): Unit =
    ref().askSync[Boolean](RegisterStatus(shuffleId, mapId, status))

  /** The statuses of mapIds, in their order; throws naming the first that
   *  the driver does not hold. */
  def statuses(shuffleId: Int, mapIds: Array[Long]): Array[Array[Byte]] = {
    val c = cache.computeIfAbsent(shuffleId, _ => new ConcurrentHashMap())
    val missing = mapIds.filter(id => !c.containsKey(id))
    if (missing.nonEmpty) {
      val got = ref().askSync[Array[Array[Byte]]](GetStatuses(shuffleId, missing))
      missing.zip(got).foreach { case (id, st) =>
        if (st == null) throw new MissingStatusException(shuffleId, id)
        c.put(id, st)
      }
    }
    mapIds.map(c.get)
  }

  /** Forgets a shuffle in this JVM; on the driver, in the table too. */
  def forget(shuffleId: Int, isDriver: Boolean): Unit = {
    cache.remove(shuffleId)
    if (isDriver && driver != null) driver.askSync[Boolean](DropShuffle(shuffleId))
  }

  def stop(): Unit = synchronized {
    cache.clear()
    driver = null
  }
}

/** The driver holds no ushuffle status for a MapStatus (a driver that
 *  restarted its table): a rerun of the map makes one. */
private[ushuffle] class MissingStatusException(shuffleId: Int, mapId: Long)
  extends java.io.IOException(s"ushuffle: the driver holds no status for shuffle " +
    s"$shuffleId map attempt $mapId")

/** Spark's own files are never asked for: every block of a ushuffle
 *  shuffle is read by UShuffleReader from the workers. */
private[ushuffle] class NoBlockResolver extends org.apache.spark.shuffle.ShuffleBlockResolver {
  override def getBlockData(blockId: org.apache.spark.storage.BlockId,
      dirs: Option[Array[String]]): org.apache.spark.network.buffer.ManagedBuffer =
    throw new UnsupportedOperationException(
      s"ushuffle: $blockId lives on ushuffle workers, not in Spark's block manager")
  override def getMergedBlockData(blockId: org.apache.spark.storage.ShuffleMergedBlockId,
      dirs: Option[Array[String]]): Seq[org.apache.spark.network.buffer.ManagedBuffer] =
    throw new UnsupportedOperationException("ushuffle: push-based shuffle is not supported")
  override def getMergedBlockMeta(blockId: org.apache.spark.storage.ShuffleMergedBlockId,
      dirs: Option[Array[String]]): org.apache.spark.network.shuffle.MergedBlockMeta =
    throw new UnsupportedOperationException("ushuffle: push-based shuffle is not supported")
  override def stop(): Unit = {}
}

private[ushuffle] object SparkVersion {
  /** Refuses a Spark this build was not made for, in one line. */
  def check(version: String = org.apache.spark.SPARK_VERSION): Unit = {
    if (!version.startsWith("3.5.")) {
      throw new UnsupportedOperationException(s"ushuffle-spark is built for Spark 3.5.x " +
        s"(Scala 2.12); this is Spark $version: use the jar built for it")
    }
  }
}
