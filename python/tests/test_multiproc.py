"""Bootstrap.from_store across processes: 2 and 4 ranks meeting through a
pure-Python store served by this process (the role a torch TCPStore plays),
or through a kinet.FileStore; a missing rank and a failing store end in
bounded kinet.Errors that say what was waited for."""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

import kinet
from pystore import FailingStore, StoreServer

HERE = os.path.dirname(os.path.abspath(__file__))
BOUND = 60  # seconds a whole group of ranks may take, even under sanitizers


def spawn(configs):
    """Runs one rank_worker.py per config; returns [(exit status, its JSON)] in order."""
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "rank_worker.py"), json.dumps(c)], cwd=HERE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in configs]
    out = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=BOUND)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise AssertionError(f"a rank ran past {BOUND} s: a wait is unbounded")
        lines = stdout.strip().splitlines()
        if not lines:
            raise AssertionError(f"rank exited {p.returncode} without a result; stderr:\n{stderr}")
        out.append((p.returncode, json.loads(lines[-1]), stderr))
    return out


def expected_allgather(n):
    return [(f"rank {i} ".encode() * (i + 1)).hex() for i in range(n)]


def rank_config(rank, n, prefix, store, timeout=30, **extra):
    """rank_worker.py's config for `rank` of `n` meeting through `store`."""
    c = {"rank": rank, "nranks": n, "prefix": prefix, "timeout": timeout, "store": store}
    c.update(extra)
    return c


def check_group(test, results, n):
    """Asserts (on `test`) that every rank of `results` exited 0 and saw the group's collectives."""
    for r, (rc, res, stderr) in enumerate(results):
        test.assertEqual(rc, 0, f"rank {r}: {res} {stderr}")
        test.assertEqual((res["rank"], res["nranks"]), (r, n))
        test.assertEqual(res["allgather"], expected_allgather(n))
        test.assertEqual(bytes.fromhex(res["broadcast"]), b"root says hi")
        test.assertEqual(res["ring"], f"{(r - 1) % n}->{r}")


class MultiprocTest(unittest.TestCase):
    def setUp(self):
        self.server = StoreServer()
        self.addCleanup(self.server.close)

    def config(self, rank, n, prefix, timeout=30, **extra):
        store = extra.pop("store", {"kind": "server", "address": list(self.server.address)})
        return rank_config(rank, n, prefix, store, timeout, **extra)

    def check_group(self, results, n):
        check_group(self, results, n)

    def test_two_ranks_and_their_comm(self):
        prefix = f"two-{os.getpid()}"
        results = spawn([self.config(r, 2, prefix, comm={"path": "proxy", "memory": "host"}) for r in range(2)])
        self.check_group(results, 2)
        for r, (_, res, _) in enumerate(results):
            comm = res["comm"]
            self.assertEqual((comm["rank"], comm["size"], comm["gpu"]), (r, 2, False))
            self.assertEqual([p["path"] for p in comm["paths"]], ["self" if p == r else "proxy" for p in range(2)])
            peer = 1 - r
            self.assertTrue(comm["paths"][peer]["reason"])
            self.assertIn(f"rank {r} -> rank {peer}: proxy", comm["report"])
            self.assertIn(comm["paths"][peer]["reason"], comm["report"])
        # rank 0 erased the id once every rank had read it
        self.assertFalse(self.server.store.check([kinet.Bootstrap.store_key(prefix)]))

    def test_four_ranks_and_a_default_comm(self):
        results = spawn([self.config(r, 4, f"four-{os.getpid()}", comm={}) for r in range(4)])
        self.check_group(results, 4)
        for r, (_, res, _) in enumerate(results):
            report = res["comm"]["report"].splitlines()
            self.assertEqual(len(report), 4, report)
            for p in range(4):
                self.assertTrue(report[p].startswith(f"rank {r} -> rank {p}: {res['comm']['paths'][p]['path']}"),
                                report[p])

    def test_file_store_across_processes(self):
        with tempfile.TemporaryDirectory() as tmp:
            cfgs = [self.config(r, 2, f"file-{os.getpid()}", store={"kind": "file", "path": tmp}) for r in range(2)]
            self.check_group(spawn(cfgs), 2)

    def test_missing_rank_times_out_naming_it(self):
        # Ranks 0 and 1 of 3; rank 2 never comes.
        results = spawn([self.config(r, 3, f"missing-{os.getpid()}", timeout=2) for r in range(2)])
        for r, (rc, res, stderr) in enumerate(results):
            self.assertEqual(rc, 3, f"rank {r}: {res} {stderr}")
            self.assertEqual(res["code"], "System")
            self.assertIn(f"bootstrap rank {r}/3: timeout", res["error"])
            self.assertIn("ranks 2 never registered", res["error"])
            self.assertIn(f"'missing-{os.getpid()}/kinet_unique_id' in Python store StoreClient", res["error"])
            self.assertLess(res["elapsed"], BOUND / 2)

    def test_missing_rank0_times_out_naming_the_key(self):
        prefix = f"norank0-{os.getpid()}"
        (rc, res, stderr), = spawn([self.config(1, 2, prefix, timeout=1)])
        self.assertEqual(rc, 3, stderr)
        self.assertEqual(res["code"], "System")
        self.assertIn("from_store rank 1/2: waiting for rank 0's unique id", res["error"])
        self.assertIn(f"timeout after 1000 ms waiting for keys '{prefix}/kinet_unique_id' in Python store "
                      f"StoreClient(127.0.0.1:{self.server.address[1]})", res["error"])
        self.assertIn("TimeoutError", res["cause"])
        self.assertLess(res["elapsed"], BOUND / 2)

    def test_failing_store_names_the_key(self):
        server = StoreServer(FailingStore("set", OSError("server disk full")))
        self.addCleanup(server.close)
        prefix = f"failing-{os.getpid()}"
        cfgs = [self.config(r, 2, prefix, timeout=1, store={"kind": "server", "address": list(server.address)})
                for r in range(2)]
        (rc0, res0, err0), (rc1, res1, err1) = spawn(cfgs)
        self.assertEqual((rc0, rc1), (3, 3), f"{res0} {err0} {res1} {err1}")
        self.assertEqual(res0["code"], "System")
        self.assertIn(f"set('{prefix}/kinet_unique_id', 800 bytes) raised OSError: server disk full", res0["error"])
        self.assertIn("OSError('server disk full')", res0["cause"])
        # Rank 0 could not publish its failure either: rank 1 waits out its bound.
        self.assertIn(f"timeout after 1000 ms waiting for keys '{prefix}/kinet_unique_id'", res1["error"])


if __name__ == "__main__":
    unittest.main()
