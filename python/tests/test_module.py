"""kinet's Python module: version, the environment table, kinet.Error and the
argument conversions every binding shares (timeouts, bytes)."""
import datetime
import os
import re
import unittest

import kinet

HERE = os.path.dirname(os.path.abspath(__file__))


class ModuleTest(unittest.TestCase):
    def test_version(self):
        self.assertRegex(kinet.version(), r"^\d+\.\d+\.\d+$")
        self.assertEqual(kinet.version(), kinet.__version__)

    def test_env_table_is_the_documented_table(self):
        table = kinet.env_table()
        names = [v["name"] for v in table]
        self.assertEqual(len(names), len(set(names)))
        with open(os.path.join(HERE, "..", "..", "docs", "ENVIRONMENT.md")) as f:
            documented = re.findall(r"^\| `([A-Z][A-Z0-9_]+)` \|", f.read(), re.M)
        self.assertEqual(sorted(names), sorted(documented))
        for v in table:
            self.assertEqual(set(v), {"name", "default", "meaning", "reader", "test_only", "value"})
            self.assertTrue(v["meaning"], v["name"])
            self.assertIsInstance(v["test_only"], bool)
        row = next(v for v in table if v["name"] == "KINET_BOOTSTRAP_TIMEOUT_MS")
        self.assertEqual(row["default"], "30000")
        self.assertEqual(row["value"], os.environ.get("KINET_BOOTSTRAP_TIMEOUT_MS"))
        row = next(v for v in table if v["name"] == "KINET_EMU_RELAXED")
        self.assertEqual(row["value"], os.environ.get("KINET_EMU_RELAXED"))  # ctest sets it: "1"

    def test_error_class(self):
        self.assertTrue(issubclass(kinet.Error, RuntimeError))
        self.assertEqual(kinet.Error.__module__, "kinet")
        e = kinet.Error("what and why")
        self.assertEqual((str(e), e.code), ("what and why", "System"))
        self.assertEqual(kinet.Error("x", "NotFound").code, "NotFound")

    def test_cpp_error_becomes_kinet_error_with_its_code(self):
        with self.assertRaises(kinet.Error) as cm:
            kinet.FileStore("")
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("FileStore: empty directory path", str(cm.exception))
        with self.assertRaises(kinet.Error) as cm:
            kinet.MemoryStore().set("", b"v")  # keys: 1 to 1024 bytes
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("empty key", str(cm.exception))
        self.assertIsNone(cm.exception.__cause__)

    def test_key_length_edge(self):
        s = kinet.MemoryStore()
        s.set("k" * 1024, b"ok")
        self.assertEqual(s.get("k" * 1024, 0), b"ok")
        with self.assertRaises(kinet.Error) as cm:
            s.set("k" * 1025, b"no")
        self.assertEqual(cm.exception.code, "InvalidArgument")
        self.assertIn("key of 1025 bytes (at most 1024)", str(cm.exception))

    def test_timeouts_every_form(self):
        s = kinet.MemoryStore()
        for t in (datetime.timedelta(milliseconds=30), 0.03, 0, datetime.timedelta(0)):
            with self.assertRaises(kinet.Error) as cm:
                s.get("missing", t)
            self.assertEqual(cm.exception.code, "System")
            ms = 0 if t in (0, datetime.timedelta(0)) else 30
            self.assertIn(f"timeout after {ms} ms waiting for key 'missing' in MemoryStore", str(cm.exception))
        s.set("k", b"v")
        self.assertEqual(s.get("k", 1), b"v")  # int seconds
        self.assertEqual(s.get("k"), b"v")  # None: the bootstrap's default bound
        # 0.0001 s rounds up to 1 ms, never down to 0.
        with self.assertRaises(kinet.Error) as cm:
            s.get("missing", 0.0001)
        self.assertIn("timeout after 1 ms", str(cm.exception))

    def test_bad_timeouts(self):
        s = kinet.MemoryStore()
        for t in (-1, -0.001, datetime.timedelta(seconds=-1), float("nan")):
            with self.assertRaises(kinet.Error) as cm:
                s.get("k", t)
            self.assertEqual(cm.exception.code, "InvalidArgument")
            self.assertIn("Store.get: timeout of", str(cm.exception))
        for t in ("5", True, [1]):
            with self.assertRaises(TypeError) as cm:
                s.wait(["k"], t)
            self.assertIn("a timeout is a datetime.timedelta or seconds", str(cm.exception))
        with self.assertRaises(OverflowError):
            s.get("k", 10 ** 400)
        s.set("k", b"v")
        self.assertEqual(s.get("k", float("inf")), b"v")  # inf: the 30-day cap, no overflow
        self.assertEqual(s.get("k", 10 ** 30), b"v")

    def test_bytes_like_values(self):
        s = kinet.MemoryStore()
        for v, want in ((b"ab", b"ab"), (bytearray(b"cd"), b"cd"), (memoryview(b"xefx")[1:3], b"ef"),
                        ("é", "é".encode()), (b"", b"")):
            s.set("k", v)
            self.assertEqual(s.get("k", 0), want)
        with self.assertRaises(TypeError) as cm:
            s.set("k", 5)
        self.assertIn("Store.set value: expected a bytes-like object or str, not int", str(cm.exception))
        with self.assertRaises(BufferError):
            s.set("k", memoryview(b"abcdef")[::2])  # not contiguous


if __name__ == "__main__":
    unittest.main()
