package org.apache.spark.shuffle.ushuffle

import org.apache.spark.SparkConf

/** The settings every suite runs ushuffle with. */
object UShuffleTestConf {
  val Manager = classOf[UShuffleManager].getName

  /** local-cluster executors are other JVMs: they get this JVM's test
   *  classpath (the plugin's classes and native libraries with it). */
  def apply(conf: SparkConf = new SparkConf(false)): SparkConf = conf
    .set("spark.shuffle.manager", Manager)
    .set("spark.sql.adaptive.localShuffleReader.enabled", "false")
    .set("spark.executor.extraClassPath", System.getProperty("java.class.path"))
    .set("spark.driver.extraClassPath", System.getProperty("java.class.path"))
    .set("spark.ushuffle.worker.threads", "2")
    .set("spark.ushuffle.memory", "16m")
}
