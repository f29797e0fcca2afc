"""The bindings alone (no cluster): object lifetimes, record order, the
memoryviews a reader yields."""
import gc
import os
import subprocess
import sys
import textwrap
import threading

import pytest

import ushuffle


def _fds():
    return len(os.listdir("/proc/self/fd"))


def _files(d):
    return [os.path.join(b, f) for b, _, fs in os.walk(d) for f in fs]


def _child(code, want, d):
    """Runs code in a child interpreter (a crash must not take pytest):
    it prints want and leaves no file in d."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == want
    assert _files(d) == []


def test_unclosed_writers_are_aborted(tmp_path):
    """A Writer dropped without close() is aborted and freed: it kept two
    fds and its files (and its pool buffers) until the process ended."""
    with ushuffle.Ring() as ring:
        fds = _fds()
        for m in range(20):
            w = ushuffle.Writer(ring, 1, m, 0, 4, target="disk",
                                dir=str(tmp_path))
            w.write(m % 4, b"x" * 100)
            w.write_gather(0, [b"y"])
            del w
        gc.collect()
        assert _fds() == fds
        assert _files(tmp_path) == []


def test_ring_close_frees_its_writers(tmp_path):
    """Ring.close() with a writer still open frees (aborts) the writer
    first, as the library requires: it freed the ring under the writer,
    and the writer's close() then crashed the interpreter."""
    code = textwrap.dedent(f"""
        import os, ushuffle
        ring = ushuffle.Ring()
        w = ushuffle.Writer(ring, 1, 0, 0, 4, target="disk",
                            dir={str(tmp_path)!r})
        for i in range(2000):
            w.write(i % 4, b"x" * 1000)
        ring.close()
        w.close()
        print("closed")
    """)
    _child(code, "closed\n", tmp_path)


def test_writers_collected_in_a_cycle_or_elsewhere(tmp_path):
    """A ring and its writer collected together (a cycle: finalized in
    any order) or a writer dropped on another thread: each writer is
    freed once, before its ring, and nothing is left."""
    code = textwrap.dedent(f"""
        import gc, os, threading, ushuffle
        d = {str(tmp_path)!r}
        fds = len(os.listdir("/proc/self/fd"))
        for m in range(5):
            ring = ushuffle.Ring()
            w = ushuffle.Writer(ring, 1, m, 0, 4, target="disk", dir=d)
            for i in range(2000):
                w.write(i % 4, b"x" * 1000)
            ring.cycle = w
            del ring, w
            gc.collect()
        ring = ushuffle.Ring()
        box = [ushuffle.Writer(ring, 1, 9, 0, 4, target="disk", dir=d)]
        t = threading.Thread(target=box.clear)  # its finalizer runs there
        t.start()
        t.join()
        ring.close()
        print(len(os.listdir("/proc/self/fd")) - fds)
    """)
    _child(code, "0\n", tmp_path)


def test_write_after_write_gather_keeps_order(tmp_path):
    """write() and write_gather() to one partition come back in the order
    written: write() overtook the batch write_gather() was filling."""
    with ushuffle.Ring() as ring, \
            ushuffle.Writer(ring, 2, 0, 0, 2, target="disk",
                            dir=str(tmp_path)) as w:
        w.write_gather(0, [b"a"])
        w.write(1, b"other")  # another partition: the batch may wait
        w.write(0, b"b")
        w.write_gather(0, [b"c", b"c"])
        w.write_gather(0, [b"d"])
        w.write(0, b"e")
        st = w.commit()
    with ushuffle.Reader(0, [st]) as r:
        assert [bytes(v) for v in r] == [b"a", b"b", b"cc", b"d", b"e"]


def test_write_into(tmp_path):
    """write_into() fills the room left in the batch, takes a fresh push
    buffer when fill asks for more room, and says False when not even an
    empty one is enough; mixed with write() and write_gather() the order
    written holds."""
    def fill(data):
        def f(buf):
            if len(buf) < len(data):
                return 0
            buf[:len(data)] = data
            return len(data)
        return f
    with ushuffle.Ring(push_size=4096) as ring, \
            ushuffle.Writer(ring, 4, 0, 0, 2, target="disk",
                            dir=str(tmp_path)) as w:
        assert w.write_into(0, fill(b"a" * 3000))
        assert w.write_into(0, fill(b"b" * 3000))  # a second buffer
        w.write(0, b"c")
        w.write_gather(0, [b"d"])
        assert not w.write_into(0, fill(b"x" * 5000))
        assert w.write_into(1, fill(b"e"))
        with pytest.raises(ValueError, match="wrote 9999 bytes"):
            w.write_into(1, lambda buf: 9999)
        st = w.commit()
    with ushuffle.Reader(0, [st]) as r:
        assert [bytes(v) for v in r] == [b"a" * 3000, b"b" * 3000, b"c",
                                         b"d"]
    with ushuffle.Reader(1, [st]) as r:
        assert [bytes(v) for v in r] == [b"e"]


def test_kept_views_raise(tmp_path):
    """A view kept past the next record or close() raises ValueError: it
    read the reader's recycled buffers (list(reader) gave wrong bytes for
    almost every record of a few MiB)."""
    def rec(i):
        return b"%07d" % i * 40

    n = 40000
    with ushuffle.Ring() as ring, \
            ushuffle.Writer(ring, 3, 0, 0, 1, target="disk",
                            dir=str(tmp_path)) as w:
        for i in range(n):
            w.write(0, rec(i))
        st = w.commit()
    with ushuffle.Reader(0, [st]) as r:
        views = list(r)
        assert len(views) == n
        for v in views:
            with pytest.raises(ValueError):
                bytes(v)
    with ushuffle.Reader(0, [st]) as r:
        for i, v in enumerate(r):
            assert v == rec(i)  # valid until the next one
        first = ushuffle.Reader(0, [st])
        v = first.next()
        assert v == rec(0)
        first.close()
        with pytest.raises(ValueError):
            bytes(v)


def test_closed_objects_raise(tmp_path):
    """Every method of a closed Ring, Writer or Reader raises ValueError
    naming it: each passed None to cffi (a TypeError about a cdata
    pointer), and a writer whose ring was closed (which frees it) reached
    the library with its freed handle."""
    with ushuffle.Ring() as ring, \
            ushuffle.Writer(ring, 4, 0, 0, 2, target="disk",
                            dir=str(tmp_path)) as w:
        w.write(0, b"a")
        st = w.commit()
    calls = [lambda: w.write(0, b"b"), lambda: w.write_gather(0, [b"c"]),
             w.commit, w.abort]
    for call in calls:
        with pytest.raises(ValueError, match="^writer is closed$"):
            call()
    with pytest.raises(ValueError, match="^ring is closed$"):
        ushuffle.Writer(ring, 4, 1, 0, 2, target="disk", dir=str(tmp_path))
    r = ushuffle.Reader(0, [st])
    r.close()
    with pytest.raises(ValueError, match="^reader is closed$"):
        r.next()
    with pytest.raises(ValueError, match="^reader is closed$"):
        list(r)
    w.close()  # closing again is no error
    d = tmp_path / "c"
    d.mkdir()
    code = textwrap.dedent(f"""
        import ushuffle
        ring = ushuffle.Ring()
        w = ushuffle.Writer(ring, 4, 2, 0, 2, target="disk", dir={str(d)!r})
        ring.close()
        for call in (lambda: w.write(0, b"x"), w.commit, w.abort):
            try:
                call()
            except ValueError as e:
                print(e)
        w.close()
    """)
    _child(code, "writer is closed\n" * 3, d)


def test_close_from_another_thread_raises(tmp_path):
    """close() of a Ring or of its Writer from another thread than the
    ring's raises ValueError and frees nothing: the library aborted the
    interpreter ("ushuffle: BUG: ... ring used from a thread other than
    the one that created it")."""
    code = textwrap.dedent(f"""
        import threading, ushuffle
        ring = ushuffle.Ring()
        w = ushuffle.Writer(ring, 1, 0, 0, 2, target="disk",
                            dir={str(tmp_path)!r})
        w.write(0, b"x" * 100)
        def other():
            for h in (w, ring):
                try:
                    h.close()
                except ValueError as e:
                    print(e)
        t = threading.Thread(target=other)
        t.start()
        t.join()
        w.write(1, b"y")  # both still open, for their thread
        w.close()
        ring.close()
    """)
    _child(code, "writer.close() from a thread other than the one that "
           "created its ring: a ring and its writers are closed by that "
           "thread\nring.close() from a thread other than the one that "
           "created its ring: a ring and its writers are closed by that "
           "thread\n", tmp_path)


def test_forked_children_leave_the_parents_output(tmp_path):
    """A child made by os.fork() is refused every call on its parent's
    Writer (EPERM), and its Writer.__del__ frees only its copy: it aborted
    the parent's writer, unlinking its files before the parent's commit
    (which failed, ENOENT) or after it (the committed data was gone)."""
    code = textwrap.dedent(f"""
        import os, shutil, sys, ushuffle
        d = {str(tmp_path / "out")!r}
        ring = ushuffle.Ring()
        w = ushuffle.Writer(ring, 5, 0, 0, 2, target="disk", dir=d)
        rec = lambda i: b"%06d" % i * 50
        n = 4000
        for i in range(n // 2):
            w.write(i % 2, rec(i))
        go_r, go_w = os.pipe()
        sys.stdout.flush()
        a = os.fork()
        if a == 0:  # calls, then drops its copy before the commit
            for call in (lambda: w.write(0, b"x"), w.commit, w.abort):
                try:
                    call()
                except ushuffle.Error as e:
                    print("child:", e.name)
            del w
            sys.exit(0)
        os.waitpid(a, 0)
        b = os.fork()
        if b == 0:  # drops its copy after the commit
            os.read(go_r, 1)
            del w
            sys.exit(0)
        for i in range(n // 2, n):
            w.write(i % 2, rec(i))
        st = w.commit()
        os.write(go_w, b"g")
        os.waitpid(b, 0)
        w.close()
        ring.close()
        got = []
        for p in range(2):
            with ushuffle.Reader(p, [st]) as r:
                got += [bytes(v) for v in r]
        print(sorted(got) == sorted(rec(i) for i in range(n)))
        shutil.rmtree(d)
    """)
    _child(code, "child: EPERM\n" * 3 + "True\n", tmp_path)


def test_sealed_maps(tmp_path):
    """encrypt_key_file: the spill file holds no record in plain text,
    the key's reader reads every record, a reader without the key or
    with another one is refused, and with a key a plain map is too."""
    key = tmp_path / "key"
    key.write_text("4 " + "ab" * 32 + "\n")
    other = tmp_path / "other"
    other.write_text("4 " + "cd" * 32 + "\n")
    for f in (key, other):
        f.chmod(0o600)
    rec = [b"plain-record-%05d-" % i * 4 for i in range(500)]
    sts = []
    with ushuffle.Ring() as ring:
        for m, k in ((0, key), (1, None)):
            with ushuffle.Writer(ring, 3, m, 0, 2, target="disk",
                                 dir=str(tmp_path / "d"),
                                 encrypt_key_file=None if k is None
                                 else str(k)) as w:
                for r in rec:
                    w.write(0, r)
                sts.append(w.commit())
    data = {f: open(f, "rb").read() for f in _files(tmp_path / "d")
            if f.endswith(".data")}
    sealed = [b for f, b in data.items() if "m0." in f][0]
    plain = [b for f, b in data.items() if "m1." in f][0]
    assert b"plain-record-00042-" in plain
    assert b"plain-record-" not in sealed
    with ushuffle.Reader(0, [sts[0]], encrypt_key_file=str(key)) as r:
        assert [bytes(v) for v in r] == rec
    with pytest.raises(ushuffle.Error, match="key id 4"):
        ushuffle.Reader(0, [sts[0]])
    with pytest.raises(ushuffle.Error, match="does not authenticate"):
        with ushuffle.Reader(0, [sts[0]], encrypt_key_file=str(other)) as r:
            list(r)
    with pytest.raises(ushuffle.Error, match="requires sealed"):
        ushuffle.Reader(0, sts, encrypt_key_file=str(key))


def test_reader_close_while_next_waits(tmp_path):
    """Reader.close() from another thread while next() waits for a
    worker raises ValueError and frees nothing, as Ring and Writer do, and
    so does a second thread's next(); the reader goes on once the worker
    answers. close() freed the reader under the waiting call: a use after
    free (ASan: recv in net_recv after reader_net_free), SIGSEGV in a
    Release build."""
    import signal
    from conftest import Workers
    (tmp_path / "w").mkdir()
    w = Workers(str(tmp_path / "w"))
    try:
        with ushuffle.Ring() as ring:
            with ushuffle.Writer(ring, 9, 0, 0, 1, workers=w.addr) as wr:
                for i in range(40000):  # more than the sockets buffer
                    wr.write(0, b"%06d" % i * 100)
                st = wr.commit()
        code = textwrap.dedent(f"""
            import os, signal, threading, time, ushuffle
            pids = {[p.pid for p in w.procs]!r}
            r = ushuffle.Reader(0, [{st!r}], timeout_ms=300000)
            for pid in pids:
                os.kill(pid, signal.SIGSTOP)
            n = []
            t = threading.Thread(target=lambda: n.append(sum(1 for _ in r)))
            t.start()
            # Until the thread waits in the kernel for the stopped worker
            # (the same syscall, not the GIL's futex, three times in a
            # row): then next() runs in C and cannot return.
            futex = {{"x86_64": "202", "aarch64": "98"}}[os.uname().machine]
            path = f"/proc/self/task/{{t.native_id}}/syscall"
            last, same = None, 0
            while same < 3:
                with open(path) as f:
                    nr = f.read().split()[0]
                same = same + 1 if nr == last and nr.isdigit() and \
                    nr != futex else 0
                last = nr
                time.sleep(0.05)
            for call in (r.close, r.next):
                try:
                    call()
                except ValueError as e:
                    print(e)
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
            t.join()
            print(n)
            r.close()
            r.close()
        """)
        _child(code, "reader.close() while next() runs in another thread: "
               "close it once next() has returned\n"
               "reader.next() while another thread's next() runs\n"
               "[40000]\n", tmp_path / "none")
    finally:
        for p in w.procs:
            p.send_signal(signal.SIGCONT)
        w.stop()


_STRUCTS = ("ush_ring_opts", "ush_seal_key", "ush_writer_opts",
            "ush_part_stats", "ush_status", "ush_status_info",
            "ush_reader_opts")


def test_cdef_matches_the_header(tmp_path):
    """Every struct the bindings declare has the header's size, and each
    of its fields the header's offset, as the C compiler lays them out:
    the declarations were hand-copied prefixes nothing checked (status
    info lacked sealed and seal_key_id, reader options npartitions)."""
    import shutil
    ffi = ushuffle.ffi
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to lay the header out")
    include = os.path.join(os.path.dirname(__file__), "..", "..", "include")
    lines = ["#include <stddef.h>", "#include <stdio.h>",
             "#include <ushuffle/ushuffle.h>", "int main(void) {"]
    want = []
    for s in _STRUCTS:
        t = ffi.typeof(f"struct {s}")
        lines.append(f'printf("{s} %zu\\n", sizeof(struct {s}));')
        want.append(f"{s} {ffi.sizeof(t)}")
        for name, field in t.fields:
            lines.append(f'printf("{s}.{name} %zu\\n", '
                         f'offsetof(struct {s}, {name}));')
            want.append(f"{s}.{name} {field.offset}")
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    subprocess.run([cc, "-std=c11", "-I", include, "-o", str(exe), str(src)],
                   check=True, capture_output=True, timeout=120)
    got = subprocess.run([str(exe)], check=True, capture_output=True,
                         text=True, timeout=60).stdout.split("\n")[:-1]
    assert got == want


def test_status_info_and_reader_range(tmp_path):
    """status_info() says sealed and seal_key_id; Reader(npartitions=n)
    reads a range of partitions one after another, .partition saying
    whose record came last."""
    key = tmp_path / "key"
    key.write_text("7 " + "ef" * 32 + "\n")
    key.chmod(0o600)
    sts = []
    with ushuffle.Ring() as ring:
        for m, k in ((0, str(key)), (1, None)):
            with ushuffle.Writer(ring, 4, m, 0, 6, target="disk",
                                 dir=str(tmp_path / "d"),
                                 encrypt_key_file=k) as w:
                for i in range(60):
                    w.write(i % 6, b"m%d-%02d" % (m, i))
                sts.append(w.commit())
    sealed, plain = (ushuffle.status_info(s) for s in sts)
    assert (sealed["sealed"], sealed["seal_key_id"]) == (1, 7)
    assert (plain["sealed"], plain["seal_key_id"]) == (0, 0)
    with ushuffle.Reader(1, sts[1:], npartitions=4) as r:
        assert r.partition == 1
        got = [(r.partition, bytes(v)) for v in r]
    assert [p for p, _ in got] == sorted(p for p, _ in got)
    assert sorted(got) == sorted((i % 6, b"m1-%02d" % i)
                                 for i in range(60) if 1 <= i % 6 < 5)
    with pytest.raises(ushuffle.Error, match="E2BIG") as e:
        ushuffle.Reader(0, sts, npartitions=(1 << 20))
    assert e.value.code == -7


def test_error_by_hand_and_pickled(tmp_path):
    """An Error made by hand says its own code, not an earlier call's
    ush_last_error(); a pickled Error keeps its class, text, code, name
    and the attributes set on it."""
    import pickle
    with pytest.raises(ushuffle.Error, match="no map statuses|status"):
        ushuffle.Reader(0, [b"not a status"])
    e = ushuffle.Error(-2, "mine")
    assert str(e) == "[Errno 2] mine: No such file or directory (ENOENT)"
    assert "status" not in str(e)
    n = ushuffle.NotCommitted(-4004, "fetch")
    n.partition, n.worker = 3, "127.0.0.1:7337"
    for x in (e, n):
        y = pickle.loads(pickle.dumps(x))
        assert type(y) is type(x)
        assert (str(y), y.code, y.name, y.args) == \
            (str(x), x.code, x.name, x.args)
        assert y.__dict__ == x.__dict__
    assert (y.partition, y.worker) == (3, "127.0.0.1:7337")
