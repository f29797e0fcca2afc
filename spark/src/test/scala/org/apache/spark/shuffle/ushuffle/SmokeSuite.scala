package org.apache.spark.shuffle.ushuffle

import org.apache.spark.{LocalSparkContext, SparkContext, SparkFunSuite}

class SmokeSuite extends SparkFunSuite with LocalSparkContext {
  test("repartition and reduceByKey") {
    sc = new SparkContext("local[2]", "smoke", UShuffleTestConf())
    val n = sc.parallelize(1 to 100000, 4).repartition(7).count()
    assert(n === 100000)
    val sums = sc.parallelize(1 to 10000, 4).map(i => (i % 13, i.toLong)).reduceByKey(_ + _)
      .collect().toMap
    assert(sums === (1 to 10000).groupBy(_ % 13).map { case (k, v) => (k, v.map(_.toLong).sum) })
  }
}
