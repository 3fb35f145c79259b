"""kinet.Bootstrap.from_store over torch.distributed's own stores: a TCPStore
shared by 2 and 4 processes, a process group's store, HashStore/PrefixStore
with threads as ranks, and torch's timeouts turned into bounded kinet.Errors.
Skipped (every test) when torch is not importable: run it with torch's
Python, e.g. on a GPU machine:

    cmake -S . -B build -DPython3_EXECUTABLE=/opt/torch/.venv/bin/python
    ninja -C build kinet_python && ctest --test-dir build -L python
"""
import datetime
import os
import threading
import time
import unittest

import kinet
from test_multiproc import BOUND, check_group, rank_config, spawn

try:
    import torch.distributed as dist

    HAVE_TORCH, WHY = dist.is_available(), "torch.distributed is not available in this torch build"
except ImportError as e:
    HAVE_TORCH, WHY = False, f"torch is not importable here ({e})"


@unittest.skipUnless(HAVE_TORCH, WHY)
class TorchStoreTest(unittest.TestCase):
    def setUp(self):
        self.master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                                    timeout=datetime.timedelta(seconds=60))
        self.port = self.master.port

    def group(self, n, prefix, **extra):
        store = {"kind": "torch", "host": "127.0.0.1", "port": self.port}
        return spawn([rank_config(r, n, prefix, store, **extra) for r in range(n)])

    def check(self, results, n):
        check_group(self, results, n)

    def test_tcp_store_two_processes_and_their_comm(self):
        prefix = f"torch-two-{os.getpid()}"
        results = self.group(2, prefix, comm={})
        self.check(results, 2)
        for r, (_, res, _) in enumerate(results):
            comm = res["comm"]
            print(f"\nrank {r} (windows in {'GPU' if comm['gpu'] else 'host'} memory, transport "
                  f"{comm['transport']}):\n{comm['report']}", end="")
            lines = comm["report"].splitlines()
            self.assertEqual(len(lines), 2)
            for p in range(2):
                self.assertTrue(lines[p].startswith(f"rank {r} -> rank {p}: {comm['paths'][p]['path']}"), lines[p])
            self.assertEqual(comm["paths"][r]["path"], "self")
            self.assertIn(comm["paths"][1 - r]["path"], ("p2p", "proxy", "gdaki"))
        self.assertFalse(self.master.check([kinet.Bootstrap.store_key(prefix)]))  # rank 0 deleted the id

    def test_tcp_store_four_processes(self):
        self.check(self.group(4, f"torch-four-{os.getpid()}"), 4)

    def test_adapter_takes_torch_wait_with_timeout(self):
        a = kinet.StoreAdapter(self.master)
        self.assertTrue(a.waits_with_timeout)  # torch's wait(keys, timeout) overload
        a.set("adapter/k", b"\x00\x01")
        self.assertEqual(a.get("adapter/k", 5), b"\x00\x01")
        self.assertTrue(a.check(["adapter/k"]))
        self.assertTrue(a.delete_key("adapter/k"))
        self.assertFalse(a.check(["adapter/k"]))

    def test_torch_timeout_becomes_a_bounded_kinet_error(self):
        a = kinet.StoreAdapter(self.master)
        for t, ms in ((0.5, 500), (0, 0)):  # 0: torch would wait forever; the adapter checks once
            with self.subTest(timeout=t):
                t0 = time.monotonic()
                with self.assertRaises(kinet.Error) as cm:
                    a.get("adapter/absent", t)
                self.assertLess(time.monotonic() - t0, BOUND / 4)
                self.assertEqual(cm.exception.code, "System")
                self.assertIn(f"store: timeout after {ms} ms waiting for keys 'adapter/absent' in Python store",
                              str(cm.exception))

    def test_missing_rank0_names_the_key(self):
        prefix = f"torch-norank0-{os.getpid()}"
        (rc, res, stderr), = spawn([{"rank": 1, "nranks": 2, "prefix": prefix, "timeout": 1,
                                     "store": {"kind": "torch", "host": "127.0.0.1", "port": self.port}}])
        self.assertEqual(rc, 3, stderr)
        self.assertIn("waiting for rank 0's unique id", res["error"])
        self.assertIn(f"timeout after 1000 ms waiting for keys '{prefix}/kinet_unique_id'", res["error"])
        self.assertLess(res["elapsed"], BOUND / 2)

    def test_threads_as_ranks_on_hash_and_prefix_stores(self):
        for store in (dist.HashStore(), dist.PrefixStore("job", dist.HashStore())):
            with self.subTest(store=type(store).__name__):
                n, out, errors = 3, [None] * 3, []

                def rank(r):
                    try:
                        b = kinet.Bootstrap.from_store(store, r, n, prefix="threads", timeout=BOUND / 2)
                        out[r] = b.allgather(bytes([r]))
                        b.barrier()
                    except Exception as e:  # reported below
                        errors.append(e)

                threads = [threading.Thread(target=rank, args=(r,)) for r in range(n)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(BOUND)
                self.assertEqual(errors, [])
                self.assertEqual(out, [[bytes([i]) for i in range(n)]] * n)

    def test_store_of_a_process_group(self):
        if not dist.is_gloo_available():
            self.skipTest("torch has no gloo backend here")
        try:
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        except Exception as e:  # torch's own set-up, not kinet's: say why and skip
            self.skipTest(f"torch could not make a gloo process group here: {type(e).__name__}: {e}")
        try:
            pg_store = dist.distributed_c10d._get_default_store()
            b = kinet.Bootstrap.from_store(pg_store, dist.get_rank(), dist.get_world_size(), prefix="pg")
            self.assertEqual((b.rank, b.nranks), (0, 1))
            self.assertEqual(b.allgather(b"solo"), [b"solo"])
        finally:
            dist.destroy_process_group()


if __name__ == "__main__":
    unittest.main()
