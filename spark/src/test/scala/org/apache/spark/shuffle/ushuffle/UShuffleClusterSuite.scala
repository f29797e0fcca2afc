package org.apache.spark.shuffle.ushuffle

import scala.concurrent.duration._

import org.scalatest.concurrent.Eventually._

import org.apache.spark._

/** Executors that are JVMs of their own (local-cluster): an executor's
 *  death costs no rerun. */
class UShuffleClusterSuite extends SparkFunSuite with LocalSparkContext {
  private val Expected =
    (1 to 20000).groupBy(_ % 97).map { case (k, v) => (k, v.map(_.toLong).sum) }

  test("an executor killed after the maps: no map reruns, the result is equal") {
    sc = new SparkContext("local-cluster[2,1,1024]", "executor-loss", UShuffleTestConf())
    val counter = new StageCounter
    sc.addSparkListener(counter)
    val rdd = sc.parallelize(1 to 20000, 4).map(i => (i % 97, i.toLong)).reduceByKey(_ + _, 8)
    assert(rdd.collect().toMap === Expected)
    eventually(timeout(60.seconds), interval(200.millis)) {
      assert(sc.getExecutorIds().size === 2)
    }
    val victim = sc.getExecutorIds().head
    assert(sc.killExecutor(victim))
    eventually(timeout(60.seconds), interval(200.millis)) {
      assert(!sc.getExecutorIds().contains(victim))
    }
    sc.listenerBus.waitUntilEmpty()
    counter.mapTasks.set(0)
    assert(rdd.collect().toMap === Expected)
    sc.listenerBus.waitUntilEmpty()
    assert(counter.mapTasks.get() === 0)
  }
}
