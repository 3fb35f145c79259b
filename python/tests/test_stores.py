"""The Store adapter (kinet.StoreAdapter, what Bootstrap.from_store wraps a
Python store in) and the bootstrap with threads as ranks, in one process."""
import datetime
import os
import tempfile
import threading
import time
import unittest

import kinet
from pystore import DictStore, FailingStore

BOUND = 20  # seconds: no call in these tests may take longer, even under sanitizers


class WaitWithoutTimeout(DictStore):
    def wait(self, keys):  # no timeout parameter: the adapter polls check() instead
        raise AssertionError("the adapter must not call a wait without a timeout")


class Minimal:
    """set/get/check only."""

    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = bytes(value)

    def get(self, key):
        return self.kv[key]

    def check(self, keys):
        return all(k in self.kv for k in keys)


class ReturnsWrong(DictStore):
    def __init__(self, get_value=None, check_value=None, delete_value=None):
        super().__init__()
        self.get_value, self.check_value, self.delete_value = get_value, check_value, delete_value
        self._kv["k"] = b"set"  # so that the adapter's wait before get returns

    def get(self, key):
        return self.get_value

    def check(self, keys):
        return self.check_value

    def delete_key(self, key):
        return self.delete_value


def run_ranks(n, body):
    """Runs body(rank) in n threads; returns their results, raising the first failure."""
    out, errors = [None] * n, []

    def one(r):
        try:
            out[r] = body(r)
        except BaseException as e:  # noqa: B902 - reported to the test below
            errors.append((r, e))

    threads = [threading.Thread(target=one, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(BOUND * 3)
        if t.is_alive():
            raise AssertionError("a rank thread did not finish")
    if errors:
        raise errors[0][1]
    return out


class AdapterTest(unittest.TestCase):
    def test_each_call_maps_to_the_torch_method(self):
        d = DictStore()
        a = kinet.StoreAdapter(d)
        self.assertIs(a.object, d)
        self.assertTrue(a.waits_with_timeout)
        self.assertEqual(a.describe(), "Python store DictStore()")
        a.set("k", b"\x00\xffv")
        self.assertEqual(d._kv["k"], b"\x00\xffv")
        self.assertEqual(a.get("k", 5), b"\x00\xffv")
        self.assertTrue(a.check(["k"]))
        self.assertFalse(a.check(["k", "absent"]))
        a.wait(["k"], 5)
        self.assertTrue(a.delete_key("k"))
        self.assertFalse(a.delete_key("k"))
        self.assertEqual(d.calls, [("set", "k"), ("wait", ["k"]), ("get", "k"), ("check", ["k"]),
                                   ("check", ["k", "absent"]), ("wait", ["k"]), ("delete_key", "k"),
                                   ("delete_key", "k")])

    def test_get_timeout_is_bounded_and_names_the_key(self):
        d = DictStore()
        t0 = time.monotonic()
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(d).get("job/missing", datetime.timedelta(milliseconds=200))
        self.assertLess(time.monotonic() - t0, BOUND)
        e = cm.exception
        self.assertEqual(e.code, "System")
        self.assertIn("store: timeout after 200 ms waiting for keys 'job/missing' in Python store DictStore()", str(e))
        self.assertIn("raised TimeoutError: DictStore: wait timeout", str(e))
        self.assertIsInstance(e.__cause__, TimeoutError)
        self.assertNotIn(("get", "job/missing"), d.calls)  # the store's own unbounded get is never reached

    def test_wait_timeout_names_only_the_missing_keys(self):
        d = DictStore()
        d.set("here", b"1")
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(d).wait(["here", "gone"], 0.1)
        self.assertIn("waiting for keys 'gone' in", str(cm.exception))

    def test_zero_timeout_never_reaches_the_stores_wait(self):
        # torch reads a zero wait timeout as "no timeout": the adapter checks once instead.
        d = DictStore()
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(d).get("k", 0)
        self.assertIn("timeout after 0 ms waiting for keys 'k'", str(cm.exception))
        self.assertEqual(d.calls, [("check", ["k"])])
        d.set("k", b"v")
        self.assertEqual(kinet.StoreAdapter(d).get("k", 0), b"v")

    def test_wait_without_timeout_polls_check(self):
        for d in (WaitWithoutTimeout(), Minimal()):
            a = kinet.StoreAdapter(d)
            self.assertFalse(a.waits_with_timeout)
            setter = threading.Thread(target=lambda: (time.sleep(0.05), d.set("late", b"v")))
            setter.start()
            self.assertEqual(a.get("late", BOUND), b"v")
            setter.join()
            t0 = time.monotonic()
            with self.assertRaises(kinet.Error) as cm:
                a.wait(["never"], 0.1)
            self.assertLess(time.monotonic() - t0, BOUND)
            self.assertIn("store: timeout after 100 ms waiting for keys 'never' in Python store", str(cm.exception))

    def test_python_exception_becomes_kinet_error_naming_the_key(self):
        cases = [("set", lambda a: a.set("job/k", b"ab"), "set('job/k', 2 bytes) raised RuntimeError: disk full"),
                 ("get", lambda a: a.get("job/k", 1), "get('job/k') raised RuntimeError: disk full"),
                 ("check", lambda a: a.check(["job/k"]), "check(['job/k']) raised RuntimeError: disk full"),
                 ("delete_key", lambda a: a.delete_key("job/k"), "delete_key('job/k') raised RuntimeError: disk full")]
        for method, call, text in cases:
            with self.subTest(method=method):
                exc = RuntimeError("disk full")
                d = FailingStore(method, exc)
                DictStore.set(d, "job/k", b"v")
                with self.assertRaises(kinet.Error) as cm:
                    call(kinet.StoreAdapter(d))
                self.assertEqual(cm.exception.code, "System")
                self.assertEqual(str(cm.exception), f"Python store FailingStore({method}): {text}")
                self.assertIs(cm.exception.__cause__, exc)

    def test_wait_failure_before_the_timeout_is_not_a_timeout(self):
        a = kinet.StoreAdapter(FailingStore("wait", ConnectionResetError("store server gone")))
        with self.assertRaises(kinet.Error) as cm:
            a.wait(["job/k"], BOUND)
        self.assertEqual(str(cm.exception), f"Python store FailingStore(wait): wait(['job/k'], {BOUND * 1000} ms) "
                                            "raised ConnectionResetError: store server gone")

    def test_kinet_error_from_the_store_keeps_its_code(self):
        a = kinet.StoreAdapter(FailingStore("set", kinet.Error("no such store", "NotFound")))
        with self.assertRaises(kinet.Error) as cm:
            a.set("k", b"v")
        self.assertEqual(cm.exception.code, "NotFound")
        self.assertIn("raised Error: no such store", str(cm.exception))

    def test_wrong_return_types(self):
        with self.assertRaises(kinet.Error) as cm:
            a = kinet.StoreAdapter(ReturnsWrong(get_value=5, check_value=True))
            a.get("k", 1)
        self.assertEqual(cm.exception.code, "System")
        self.assertIn("get('k') returned int, not bytes", str(cm.exception))
        self.assertEqual(kinet.StoreAdapter(ReturnsWrong(get_value="é", check_value=True)).get("k", 1), "é".encode())
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(ReturnsWrong(check_value=None)).check(["k"])
        self.assertIn("check(['k']) returned NoneType, not bool", str(cm.exception))
        self.assertTrue(kinet.StoreAdapter(ReturnsWrong(delete_value=None)).delete_key("k"))
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(ReturnsWrong(delete_value="yes")).delete_key("k")
        self.assertIn("delete_key('k') returned str, not bool", str(cm.exception))

    def test_missing_methods(self):
        class NoCheck:
            def set(self, k, v): ...

            def get(self, k): ...

        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(NoCheck())
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("has no method check()", str(cm.exception))
        with self.assertRaises(kinet.Error) as cm:
            kinet.Bootstrap.from_store(object(), 0, 1)
        self.assertIn("has no method set()", str(cm.exception))
        with self.assertRaises(kinet.Error) as cm:
            kinet.StoreAdapter(Minimal()).delete_key("k")
        self.assertEqual(cm.exception.code, "NotSupported")
        self.assertIn("has no delete_key(): key 'k' stays set", str(cm.exception))

    def test_keyboard_interrupt_ends_a_wait_as_itself(self):
        a = kinet.StoreAdapter(FailingStore("check", KeyboardInterrupt()))
        with self.assertRaises(KeyboardInterrupt):
            a.wait(["k"], 0)


class ThreadRanksTest(unittest.TestCase):
    def check_bootstrap(self, store, n, prefix):
        def rank(r):
            b = kinet.Bootstrap.from_store(store, r, n, prefix=prefix, timeout=BOUND)
            self.assertEqual((b.rank, b.nranks, b.size), (r, n, n))
            got = b.allgather(bytes([r]) * (r + 1))
            b.barrier()
            root = n - 1
            bc = b.broadcast(b"from the last" if r == root else None, root=root)
            b.send((r + 1) % n, 7, f"{r}->{(r + 1) % n}".encode())
            ring = b.recv((r - 1) % n, 7)
            return got, bc, ring

        for r, (got, bc, ring) in enumerate(run_ranks(n, rank)):
            self.assertEqual(got, [bytes([i]) * (i + 1) for i in range(n)])
            self.assertEqual(bc, b"from the last")
            self.assertEqual(ring, f"{(r - 1) % n}->{r}".encode())

    def test_dict_store_through_the_adapter(self):
        d = DictStore()
        self.check_bootstrap(d, 3, "threads-dict")
        self.assertFalse(d.check(["threads-dict/kinet_unique_id"]))  # rank 0 erased it after init

    def test_memory_store(self):
        self.check_bootstrap(kinet.MemoryStore(), 4, "threads-mem")

    def test_file_store(self):
        with tempfile.TemporaryDirectory() as tmp:
            s = kinet.FileStore(os.path.join(tmp, "store"))
            self.assertEqual(s.path, os.path.join(tmp, "store"))
            self.check_bootstrap(s, 2, "threads-file")
            s.set("k", "v")
            self.assertEqual(s.get("k", 0), b"v")
            self.assertTrue(s.delete_key("k"))
            self.assertFalse(s.check(["k"]))

    def test_bad_arguments(self):
        for rank, n in ((0, 0), (-1, 2), (2, 2)):
            with self.assertRaises(kinet.Error) as cm:
                kinet.Bootstrap.from_store(kinet.MemoryStore(), rank, n)
            self.assertEqual(cm.exception.code, "InvalidArgument")
            self.assertIn("rank or nranks out of range", str(cm.exception))
        with self.assertRaises(kinet.Error) as cm:
            kinet.Bootstrap.from_store(kinet.MemoryStore(), 0, 1, timeout=0)
        self.assertIn("timeout 0 ms", str(cm.exception))
        b = kinet.Bootstrap.from_store(kinet.MemoryStore(), 0, 1, prefix="solo")
        self.assertEqual(b.allgather(b"x"), [b"x"])
        for root in (-1, 1):
            with self.assertRaises(kinet.Error) as cm:
                b.broadcast(b"x", root=root)
            self.assertIn(f"broadcast root {root} out of range (1 ranks)", str(cm.exception))
        with self.assertRaises(TypeError):
            b.broadcast(None, root=0)

    def test_init_from_a_unique_id(self):
        uid = kinet.create_unique_id()
        self.assertRegex(uid, r"^[0-9a-f]{256}$")
        got = run_ranks(2, lambda r: kinet.Bootstrap.init(uid, r, 2, timeout=BOUND).allgather(f"{r}".encode()))
        self.assertEqual(got, [[b"0", b"1"]] * 2)
        for bad in ("", "zz" * 128, uid[:-2]):
            with self.assertRaises(kinet.Error) as cm:
                kinet.Bootstrap.init(bad, 0, 2, timeout=1)
            self.assertEqual(cm.exception.code, "InvalidArgument")

    def test_comm_of_one_rank_and_its_argument_errors(self):
        b = kinet.Bootstrap.from_store(kinet.MemoryStore(), 0, 1, prefix="comm1")
        comm = kinet.Comm(b, path="proxy", memory="host")
        self.assertEqual((comm.rank, comm.size, comm.gpu), (0, 1, False))
        self.assertEqual(comm.path(0), "self")
        self.assertEqual(comm.paths(), [{"peer": 0, "path": "self", "reason": comm.path_reason(0)}])
        self.assertEqual(comm.describe_paths(), comm.report())
        self.assertTrue(comm.describe_paths().startswith("rank 0 -> rank 0: self"))
        self.assertEqual((comm.device_error(), comm.peer_error(0)), ("", ""))
        for call in (comm.path, comm.path_reason, comm.peer_error):
            with self.assertRaises(kinet.Error) as cm:
                call(1)
            self.assertEqual(cm.exception.code, "InvalidArgument")
            self.assertIn("comm rank 0: peer 1 out of range 0..0", str(cm.exception))
        comm.barrier()
        with self.assertRaises(kinet.Error) as cm:
            kinet.Comm(b, memory="disk")
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("Comm: memory 'disk' (auto, host or gpu)", str(cm.exception))
        with self.assertRaises(kinet.Error) as cm:
            kinet.Comm(b, path="carrier-pigeon", memory="host")
        self.assertEqual(cm.exception.code, "InvalidArgument")
        del b  # the Comm keeps its bootstrap alive
        comm.barrier()

    def test_overlapping_calls_are_refused(self):
        store = kinet.MemoryStore()
        b0, b1 = run_ranks(2, lambda r: kinet.Bootstrap.from_store(store, r, 2, prefix="overlap", timeout=BOUND))
        def barrier_until_entered():
            # The probe below may hold the bootstrap at the instant the barrier starts: then the
            # barrier is the call refused, and it tries again (b1 waits in its barrier meanwhile).
            while True:
                try:
                    return b0.barrier()
                except kinet.Error as e:
                    if e.code != "BadState":
                        raise
                    time.sleep(0.001)

        in_barrier = threading.Thread(target=barrier_until_entered)
        in_barrier.start()
        deadline = time.monotonic() + BOUND
        refused = None
        while refused is None and time.monotonic() < deadline:
            # A send to itself: InvalidArgument (no side effect) until the barrier holds the bootstrap.
            try:
                b0.send(0, 9, b"x")
            except kinet.Error as e:
                if e.code == "BadState":
                    refused = e
                else:
                    self.assertEqual(e.code, "InvalidArgument", str(e))
                    time.sleep(0.001)
        b1.barrier()
        in_barrier.join(BOUND)
        self.assertIsNotNone(refused)
        self.assertEqual(refused.code, "BadState")
        self.assertIn("bootstrap rank 0: send called while another thread is in a call on this Bootstrap",
                      str(refused))


if __name__ == "__main__":
    unittest.main()
