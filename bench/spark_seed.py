"""The seed's Spark job, one side of one round: run by spark-submit.

  spark-submit [--jars ushuffle-spark.jar --conf spark.shuffle.manager=...]
      bench/spark_seed.py --rows N --partitions P --repeat 3 --row-bytes 80

Caches N rows and repartitions them into P partitions `repeat` times, each
into a `noop` sink (every column moves: Spark prunes columns through a
shuffle, so an aggregate after it would move one long a row). Prints one
JSON line: wall time of the repartitions, the map and reduce tasks' CPU
(executor CPU time of the shuffle-map and result stages, from Spark's
status API), the whole driver JVM's CPU and peak RSS (local mode: the
executors are in it), and the rows each repartition verified.

Rows: --row-bytes 80 is the seed's (id, id % 1000, a long, a uuid string);
100 is (id, id % 1000, a 64-byte string), Spark SQL's 100-byte rows.
"""
import argparse
import json
import os
import time
import urllib.request

from pyspark.sql import SparkSession


def proc_stat(pid):
    """(CPU seconds, peak RSS bytes) of a process."""
    with open(f"/proc/{pid}/stat") as f:
        v = f.read().rsplit(")", 1)[1].split()
    cpu = (int(v[11]) + int(v[12])) / os.sysconf("SC_CLK_TCK")
    hwm = 0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) * 1024
    return cpu, hwm


def stages(spark):
    """Every completed stage of the application, from the status API."""
    ui = spark.sparkContext.uiWebUrl
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages"
                                "?status=complete") as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--partitions", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--row-bytes", type=int, choices=(80, 100), default=80)
    a = ap.parse_args()
    spark = SparkSession.builder.getOrCreate()
    jvm_pid = spark.sparkContext._jvm.ProcessHandle.current().pid()
    if a.row_bytes == 80:
        df = spark.range(a.rows).selectExpr(
            "id", "id % 1000 as k", "id * 7 as a", "uuid() as u")
    else:
        df = spark.range(a.rows).selectExpr(
            "id", "id % 1000 as k",
            "repeat(substr(md5(cast(id as string)), 1, 16), 4) as s")
    df = df.cache()
    assert df.count() == a.rows
    before = {s["stageId"] for s in stages(spark)}
    cpu0, _ = proc_stat(jvm_pid)
    t0 = time.time()
    for _ in range(a.repeat):
        df.repartition(a.partitions).write.format("noop").mode(
            "overwrite").save()
    wall = time.time() - t0
    cpu1, hwm = proc_stat(jvm_pid)
    new = [s for s in stages(spark) if s["stageId"] not in before]
    # One check of the rows' integrity through the same shuffle.
    got = df.repartition(a.partitions).selectExpr(
        "count(*) as n", "sum(id) as s", "count(distinct k) as k").first()
    ok = (got.n == a.rows and got.s == a.rows * (a.rows - 1) // 2
          and got.k == min(1000, a.rows))
    maps = [s for s in new if s.get("shuffleWriteBytes", 0) > 0]
    reds = [s for s in new if s.get("shuffleWriteBytes", 0) == 0
            and s.get("shuffleReadBytes", 0) > 0]
    conf = spark.sparkContext.getConf()
    print(json.dumps({
        "manager": conf.get("spark.shuffle.manager", "sort"),
        "rows": a.rows, "partitions": a.partitions, "repeat": a.repeat,
        "row_bytes": a.row_bytes, "wall_s": wall,
        "map_cpu_s": sum(s["executorCpuTime"] for s in maps) / 1e9,
        "reduce_cpu_s": sum(s["executorCpuTime"] for s in reds) / 1e9,
        "shuffle_write_bytes": sum(s["shuffleWriteBytes"] for s in maps),
        "jvm_cpu_s": cpu1 - cpu0, "jvm_peak_rss": hwm,
        "verified": ok}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
