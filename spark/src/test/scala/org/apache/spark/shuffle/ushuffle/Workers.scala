package org.apache.spark.shuffle.ushuffle

import java.io.File
import java.net.{InetSocketAddress, ServerSocket, Socket}
import java.nio.charset.StandardCharsets
import java.nio.file.Files

/** Real ushuffled processes (the build's), each on its own port and
 *  directory, proving the secret in `secret`. */
class Workers(n: Int, val secret: String, root: File) {
  private val bin = sys.props.getOrElse("ushuffle.ushuffled",
    throw new IllegalStateException("-Dushuffle.ushuffled names the ushuffled to test"))
  private val secretFile = new File(root, "secret")
  Files.write(secretFile.toPath, secret.getBytes(StandardCharsets.UTF_8))
  secretFile.setReadable(false, false)
  secretFile.setReadable(true, true)
  val ports: Array[Int] = Array.fill(n)(freePort())
  val dirs: Array[File] = Array.tabulate(n)(i => new File(root, s"w$i"))
  private val procs = new Array[Process](n)
  (0 until n).foreach(start(_))

  def list: String = ports.map(p => s"127.0.0.1:$p").mkString(",")

  /** Starts worker i, on a fresh directory when `fresh` (a worker that lost
   *  its disk), and waits until it accepts connections. */
  def start(i: Int, fresh: Boolean = false): Unit = {
    if (fresh) dirs(i) = new File(root, s"w$i-${System.nanoTime()}")
    dirs(i).mkdirs()
    val pb = new ProcessBuilder(bin, s"--listen=127.0.0.1:${ports(i)}", s"--dir=${dirs(i)}",
      s"--secret-file=$secretFile", "--threads=1", "--log-level=error")
    pb.redirectErrorStream(true)
    pb.redirectOutput(ProcessBuilder.Redirect.appendTo(new File(root, s"w$i.log")))
    procs(i) = pb.start()
    val deadline = System.nanoTime() + 20L * 1000 * 1000 * 1000
    var up = false
    while (!up) {
      try {
        new Socket().connect(new InetSocketAddress("127.0.0.1", ports(i)), 200)
        up = true
      } catch {
        case _: java.io.IOException if System.nanoTime() < deadline && procs(i).isAlive =>
          Thread.sleep(50)
      }
    }
  }

  /** kill -9. */
  def kill(i: Int): Unit = {
    procs(i).destroyForcibly()
    procs(i).waitFor()
  }

  /** The files worker i stores shuffle data in. */
  def dataFiles(i: Int): Seq[File] = {
    def walk(f: File): Seq[File] =
      if (f.isDirectory) Option(f.listFiles()).toSeq.flatten.flatMap(walk) else Seq(f)
    walk(dirs(i)).filter(f => f.length() > 4096)
  }

  def stop(): Unit = procs.filter(_ != null).foreach { p => p.destroy(); p.waitFor() }

  private def freePort(): Int = {
    val s = new ServerSocket(0)
    try s.getLocalPort finally s.close()
  }
}
