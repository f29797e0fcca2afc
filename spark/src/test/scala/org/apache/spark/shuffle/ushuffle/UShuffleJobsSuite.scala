package org.apache.spark.shuffle.ushuffle

import java.io.RandomAccessFile
import java.util.concurrent.atomic.AtomicInteger

import org.apache.spark._
import org.apache.spark.scheduler.{SparkListener, SparkListenerStageSubmitted, SparkListenerTaskEnd}
import org.apache.spark.sql.{DataFrame, SparkSession}
import org.apache.spark.sql.expressions.Window
import org.apache.spark.sql.functions._
import org.apache.spark.util.Utils

/** A partitioner of our own, for the join. */
class ModPartitioner(n: Int) extends Partitioner {
  override def numPartitions: Int = n
  override def getPartition(key: Any): Int = Math.floorMod(key.hashCode(), n)
  override def equals(o: Any): Boolean = o match {
    case m: ModPartitioner => m.numPartitions == n
    case _ => false
  }
  override def hashCode(): Int = n
}

/** Map tasks run, and map stages (re)submitted, as a listener sees them. */
class StageCounter extends SparkListener {
  val mapTasks = new AtomicInteger()
  val resubmits = new AtomicInteger()
  override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
    if (e.taskType == "ShuffleMapTask") mapTasks.incrementAndGet()
  override def onStageSubmitted(e: SparkListenerStageSubmitted): Unit =
    if (e.stageInfo.attemptNumber() > 0) resubmits.incrementAndGet()
}

/**
 * The same jobs under Spark's sort shuffle and under ushuffle give equal
 * results; the failures Spark must survive (a task killed mid-write, a
 * worker lost, a corrupt status or frame) give equal results too; the
 * errors a user can make are one line.
 */
class UShuffleJobsSuite extends SparkFunSuite with LocalSparkContext {

  private def rddJobs(sc: SparkContext): Seq[(String, Seq[Any])] = {
    val pairs = sc.parallelize(1 to 30000, 5).map(i => (i % 1013, s"v$i"))
    val skewed = sc.parallelize(1 to 20000, 4).map(i => (if (i % 3 == 0) 7 else i % 500, i))
    Seq(
      "repartition" -> sc.parallelize(1 to 40000, 4).repartition(17)
        .mapPartitions(it => Iterator(it.map(_.toLong).sum)).collect().toSeq.sorted,
      "reduceByKey" -> pairs.mapValues(_.length.toLong).reduceByKey(_ + _, 11)
        .collect().toSeq.sortBy(_._1),
      "groupByKey" -> skewed.groupByKey(9).mapValues(_.toSeq.sorted).collect().toSeq.sortBy(_._1),
      "sortByKey" -> sc.parallelize((1 to 20000).map(i => ((i * 7919) % 20011, i)), 4)
        .sortByKey(numPartitions = 6).collect().toSeq,
      "join" -> pairs.partitionBy(new ModPartitioner(7))
        .join(skewed.mapValues(_.toString).partitionBy(new ModPartitioner(5)))
        .collect().toSeq.sortBy(x => (x._1, x._2._1, x._2._2)),
      "empty partitions" -> sc.parallelize(1 to 10, 2).map(i => (i, i)).groupByKey(2000)
        .collect().toSeq.sortBy(_._1),
      "large records" -> sc.parallelize(1 to 6, 2).map(i => (i, "x" * (i * 50000)))
        .repartition(3).map(_._2.length).collect().toSeq.sorted)
  }

  private def run[T](conf: SparkConf, master: String = "local[2]")(f: SparkContext => T): T = {
    sc = new SparkContext(master, "jobs", conf)
    try f(sc) finally resetSparkContext()
  }

  Seq("java", "kryo").foreach { ser =>
    test(s"RDD jobs equal the sort shuffle's ($ser serializer)") {
      def conf = {
        val c = new SparkConf(false)
        if (ser == "kryo") c.set("spark.serializer", "org.apache.spark.serializer.KryoSerializer")
        c
      }
      val sort = run(conf)(rddJobs)
      val ours = run(UShuffleTestConf(conf))(rddJobs)
      sort.zip(ours).foreach { case ((name, a), (_, b)) =>
        assert(a === b, s"$name differs")
        assert(a.nonEmpty, s"$name returned nothing")
      }
    }
  }

  private def sqlJobs(spark: SparkSession): Seq[(String, Seq[String], String)] = {
    import spark.implicits._
    val events = spark.range(0, 200000).select(
      (when($"id" % 2 === 0, lit(1L)).otherwise($"id" % 1000)).as("k"),
      ($"id" % 97).as("g"),
      when($"id" % 11 === 0, lit(null)).otherwise(concat(lit("u/"), $"id".cast("string")))
        .as("url"),
      $"id".as("v"))
    // Over the 1 MiB broadcast threshold below: a sort-merge join, unless
    // AQE misreads a stage's size.
    val dims = spark.range(0, 100000).select($"id".as("k"), ($"id" * 3).as("w"))
    def rows(name: String, df: DataFrame): (String, Seq[String], String) = {
      val r = df.collect().map(_.toString).toSeq.sorted
      (name, r, df.queryExecution.executedPlan.toString)
    }
    Seq(
      rows("groupBy", events.groupBy($"g").agg(count($"url"), sum($"v"), max($"url"))),
      rows("join", events.join(dims, "k").groupBy($"g").agg(sum($"w"), count(lit(1)))),
      rows("window", events.filter($"v" < 20000).withColumn("r",
        row_number().over(Window.partitionBy($"g").orderBy($"v".desc))).filter($"r" <= 3)),
      rows("orderBy", events.filter($"v" % 7 === 0).orderBy($"url".desc_nulls_last, $"v")
        .limit(500)),
      rows("repartition", events.repartition(300, $"url").groupBy(spark_partition_id())
        .count()))
  }

  test("DataFrame jobs with AQE equal the sort shuffle's; coalescing and skew splits happen") {
    def session(conf: SparkConf) = SparkSession.builder().master("local[2]")
      .config(conf
        .set("spark.sql.adaptive.enabled", "true")
        .set("spark.sql.adaptive.advisoryPartitionSizeInBytes", "64k")
        .set("spark.sql.adaptive.skewJoin.skewedPartitionThresholdInBytes", "64k")
        .set("spark.sql.adaptive.skewJoin.skewedPartitionFactor", "2")
        .set("spark.sql.autoBroadcastJoinThreshold", "1m")
        .set("spark.sql.shuffle.partitions", "40"))
      .getOrCreate()
    def collect(conf: SparkConf) = {
      val spark = session(conf)
      try sqlJobs(spark) finally spark.stop()
    }
    val sort = collect(new SparkConf(false))
    val ours = collect(UShuffleTestConf())
    sort.zip(ours).foreach { case ((name, a, planA), (_, b, planB)) =>
      assert(a === b, s"$name differs")
      // AQE sees the stages' real sizes: the same join strategies.
      assert(planA.contains("BroadcastHashJoin") === planB.contains("BroadcastHashJoin"),
        s"$name: sort\n$planA\nushuffle\n$planB")
    }
    val plans = ours.map(_._3).mkString("\n")
    assert(plans.contains("coalesced"), plans)
    assert(plans.contains("skewed"), plans)
  }

  test("a task killed mid-write is retried; the result is equal") {
    val killed = new AtomicInteger()
    val conf = UShuffleTestConf()
    sc = new SparkContext("local[2,4]", "kill", conf)
    sc.addSparkListener(new SparkListener {
      override def onTaskEnd(e: SparkListenerTaskEnd): Unit =
        if (e.reason.isInstanceOf[TaskKilled]) killed.incrementAndGet()
    })
    val n = sc.parallelize(1 to 40000, 4).mapPartitionsWithIndex { (i, it) =>
      val ctx = TaskContext.get()
      it.map { x =>
        if (i == 1 && ctx.attemptNumber() == 0 && ctx.stageAttemptNumber() == 0 && x % 10000 == 5000) {
          // Ask the scheduler to kill this attempt, then write on until the
          // kill arrives: the writer is mid-write when it does.
          SparkContext.getActive.get.killTaskAttempt(ctx.taskAttemptId(), true, "test kill")
          while (true) { ctx.killTaskIfInterrupted(); Thread.sleep(5) }
        }
        (x % 313, x.toLong)
      }
    }.reduceByKey(_ + _, 13).collect().toMap
    assert(n === (1 to 40000).groupBy(_ % 313).map { case (k, v) => (k, v.map(_.toLong).sum) })
    assert(killed.get() === 1)
  }

  test("two attempts of a map both commit; readers read the one the tracker holds") {
    // As speculation does (which Spark never runs on one host: a copy is not
    // launched where an attempt runs): two task attempts of map 0, other
    // data each, both committed; the tracker names one, then the other.
    run(UShuffleTestConf()) { sc =>
      val mgr = sc.env.shuffleManager
      val tracker = sc.env.mapOutputTracker.asInstanceOf[MapOutputTrackerMaster]
      val dep = new ShuffleDependency[Int, Int, Int](
        sc.parallelize(1 to 1, 1).map(i => (i, i)), new HashPartitioner(3))
      val handle = mgr.registerShuffle(dep.shuffleId, dep)
      tracker.registerShuffle(dep.shuffleId, 1, 1)
      val tmm = new org.apache.spark.memory.TaskMemoryManager(sc.env.memoryManager, 0L)
      def attempt(taskAttemptId: Long, data: Seq[(Int, Int)]) = {
        val ctx = new TaskContextImpl(0, 0, 0, taskAttemptId, taskAttemptId.toInt, 1, tmm,
          new java.util.Properties, sc.env.metricsSystem)
        val w = mgr.getWriter[Int, Int](handle, taskAttemptId, ctx, ctx.taskMetrics.shuffleWriteMetrics)
        w.write(data.iterator)
        w.stop(true).get
      }
      val first = attempt(100L, (1 to 50).map(i => (i, i)))
      val second = attempt(101L, (1 to 50).map(i => (i, -i)))
      def read(): Seq[(Int, Int)] = {
        val ctx = new TaskContextImpl(1, 0, 0, 200L, 0, 1, tmm, new java.util.Properties,
          sc.env.metricsSystem)
        (0 until 3).flatMap { p =>
          mgr.getReader[Int, Int](handle, p, p + 1, ctx,
            ctx.taskMetrics.createTempShuffleReadMetrics()).read().map(r => (r._1, r._2))
        }.sortBy(_._1)
      }
      tracker.registerMapOutput(dep.shuffleId, 0, second)
      assert(read() === (1 to 50).map(i => (i, -i)))
      tracker.unregisterMapOutput(dep.shuffleId, 0, second.location)
      tracker.registerMapOutput(dep.shuffleId, 0, first)
      assert(read() === (1 to 50).map(i => (i, i)))
      mgr.unregisterShuffle(dep.shuffleId)
    }
  }

  private def withWorkers[T](n: Int)(f: Workers => T): T = {
    val root = Utils.createTempDir()
    val w = new Workers(n, "test-secret-" + System.nanoTime(), root)
    try f(w) finally w.stop()
  }

  private def workerConf(w: Workers, replicas: Int) = UShuffleTestConf()
    .set("spark.ushuffle.workers", w.list)
    .set("spark.ushuffle.secret", w.secret)
    .set("spark.ushuffle.replicas", replicas.toString)
    .set("spark.ushuffle.io.timeout", "3s")

  private val Expected = (1 to 20000).groupBy(_ % 97).map { case (k, v) => (k, v.map(_.toLong).sum) }

  /** Runs a shuffle, breaks something, reads it again: the result must be
   *  equal; returns the map tasks the second read needed. */
  private def readAgainAfter(conf: SparkConf)(break: (SparkContext, Int) => Unit): Int = {
    sc = new SparkContext("local[2]", "again", conf)
    val counter = new StageCounter
    sc.addSparkListener(counter)
    val rdd = sc.parallelize(1 to 20000, 4).map(i => (i % 97, i.toLong)).reduceByKey(_ + _, 8)
    assert(rdd.collect().toMap === Expected)
    val shuffleId = rdd.dependencies.head.asInstanceOf[ShuffleDependency[_, _, _]].shuffleId
    break(sc, shuffleId)
    sc.listenerBus.waitUntilEmpty()
    counter.mapTasks.set(0)
    assert(rdd.collect().toMap === Expected)
    sc.listenerBus.waitUntilEmpty()
    counter.mapTasks.get()
  }

  test("a ushuffled killed, replicas 1: the maps rerun, the result is equal") {
    withWorkers(2) { w =>
      val reran = readAgainAfter(workerConf(w, 1)) { (_, _) =>
        w.kill(0)
        w.start(0, fresh = true) // back on its port, its disk lost
      }
      assert(reran > 0)
    }
  }

  test("a ushuffled killed, replicas 2: no map reruns, the result is equal") {
    withWorkers(2) { w =>
      val reran = readAgainAfter(workerConf(w, 2)) { (_, _) => w.kill(1) }
      assert(reran === 0)
    }
  }

  test("a status corrupted on its way to a reader: the maps rerun, the result is equal") {
    val reran = readAgainAfter(UShuffleTestConf()) { (sc, shuffleId) =>
      val tracker = sc.env.mapOutputTracker.asInstanceOf[MapOutputTrackerMaster]
      val mapId = tracker.shuffleStatuses(shuffleId).mapStatuses.head.mapId
      val st = StatusTracker.statuses(shuffleId, Array(mapId)).head.clone()
      st(st.length / 2) = (st(st.length / 2) ^ 0x5a).toByte
      StatusTracker.register(shuffleId, mapId, st)
      StatusTracker.forget(shuffleId, isDriver = false) // this JVM's cached copy
    }
    assert(reran > 0)
  }

  test("a frame corrupted on a worker's disk: the maps rerun, the result is equal") {
    withWorkers(1) { w =>
      val reran = readAgainAfter(workerConf(w, 1)) { (_, _) =>
        val files = w.dataFiles(0)
        assert(files.nonEmpty, s"no data files under ${w.dirs(0)}")
        files.foreach { f =>
          val raf = new RandomAccessFile(f, "rw")
          try {
            raf.seek(100)
            val b = raf.read()
            raf.seek(100)
            raf.write(b ^ 0xff)
          } finally raf.close()
        }
      }
      assert(reran > 0)
    }
  }

  private def firstLine(e: Throwable): String = {
    var c = e
    while (c.getCause != null && !c.getMessage.contains("ushuffle") &&
        !c.getMessage.contains("writer")) c = c.getCause
    c.getMessage.linesIterator.next()
  }

  test("no reachable worker: the job fails with one line naming it") {
    val e = intercept[SparkException] {
      run(UShuffleTestConf().set("spark.ushuffle.workers", "127.0.0.1:1")
        .set("spark.ushuffle.secret", "0123456789abcdef0123"), "local[2,1]") { sc =>
        sc.parallelize(1 to 10, 2).map(i => (i, i)).groupByKey().count()
      }
    }
    assert(e.getMessage.contains("127.0.0.1:1"), e.getMessage)
    assert(e.getMessage.contains("refused"), e.getMessage)
  }

  test("a wrong secret: the job fails with one line saying so") {
    withWorkers(1) { w =>
      val e = intercept[SparkException] {
        run(workerConf(w, 1).set("spark.ushuffle.secret", "not-the-secret-at-all"),
          "local[2,1]") { sc =>
          sc.parallelize(1 to 10, 2).map(i => (i, i)).groupByKey().count()
        }
      }
      assert(e.getMessage.contains(w.list), e.getMessage)
      assert(e.getMessage.toLowerCase.contains("secret") ||
        e.getMessage.toLowerCase.contains("authenticat"), e.getMessage)
    }
  }

  test("a missing native library is one line naming what is missing") {
    val err = Native.tryLoad(new java.net.URLClassLoader(Array.empty, null))
    assert(err.contains("native/linux-x86_64/native.list is not in the ushuffle-spark jar"), err)
    assert(!err.contains("\n"))
  }

  test("an unsupported Spark version is one line naming both") {
    val e = intercept[UnsupportedOperationException](SparkVersion.check("4.0.1"))
    assert(e.getMessage.contains("Spark 3.5.x") && e.getMessage.contains("4.0.1"))
    SparkVersion.check() // this Spark
  }

  test("a write into a buffer after its swap fails in Java") {
    run(UShuffleTestConf()) { sc =>
      val mgr = sc.env.shuffleManager.asInstanceOf[UShuffleManager]
      val w = Native.writerOpen(999, 0, 0, 1, mgr.workers(), mgr.app(), 1, "none",
        1 << 20, 4096, 1000, 0, null)
      try {
        val bufs = new LentBuffers(w, 1)
        val b = bufs.get(0)
        b.put(Array[Byte](1, 2, 3))
        bufs.counted(0)
        bufs.swap(0)
        intercept[java.nio.BufferOverflowException](b.put(1.toByte))
        intercept[IndexOutOfBoundsException](b.put(0, 1.toByte))
        bufs.finish()
        Native.commit(w, new Array[Long](1))
      } finally Native.writerFree(w)
    }
  }
}
