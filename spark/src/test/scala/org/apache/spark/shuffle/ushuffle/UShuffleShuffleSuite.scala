package org.apache.spark.shuffle.ushuffle

import org.scalatest.BeforeAndAfterAll

import org.apache.spark.ShuffleSuite

/** Spark's own ShuffleSuite (spark-core's tests jar), run with ushuffle as
 *  the shuffle manager, local and local-cluster. */
class UShuffleShuffleSuite extends ShuffleSuite with BeforeAndAfterAll {
  override def beforeAll(): Unit = {
    super.beforeAll()
    UShuffleTestConf(conf)
  }

  /** The tests that look at the sort shuffle's own files, which a ushuffle
   *  shuffle does not write: its data is on the workers. */
  override protected def excluded: Seq[String] = Seq(
    // asserts that the shuffle left files in the block manager's dirs
    "shuffle with different compression settings (SPARK-3426)",
    // deletes a sort shuffle data file and expects the map stage rerun
    "[SPARK-4085] rerun map stage if reduce stage cannot find its local shuffle file",
    // asserts that sort shuffle data files exist after the job
    "cannot find its local shuffle file if no execution of the stage and rerun shuffle",
    // corrupts a sort shuffle data file and its checksum file; ushuffle's
    // own corruption case is UShuffleJobsSuite's "frame corrupted on a worker"
    "SPARK-36206: shuffle checksum detect disk corruption")
}
