"""A pure-Python key-value store with torch.distributed.Store's methods, for
kinet's tests where torch is not installed.

DictStore   one process: a dict under a threading.Condition. get() blocks
            until the key exists (at most the store's timeout) and raises
            TimeoutError then, as torch's stores raise DistStoreError.
StoreServer serves a DictStore to other processes (multiprocessing.connection,
            one thread per client); StoreClient is the other processes' view,
            with the same methods, each one request.
"""
import datetime
import threading
import time
from multiprocessing.connection import Client, Listener

DEFAULT_TIMEOUT = datetime.timedelta(seconds=30)


def _seconds(timeout):
    return timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else float(timeout)


class DictStore:
    def __init__(self, timeout=DEFAULT_TIMEOUT):
        self.timeout = timeout
        self._kv = {}
        self._cv = threading.Condition()
        self.calls = []  # (method, first argument): what the tests check the adapter called

    def _wait_locked(self, keys, timeout):
        deadline = time.monotonic() + _seconds(timeout)
        while not all(k in self._kv for k in keys):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [k for k in keys if k not in self._kv]
                raise TimeoutError(f"DictStore: wait timeout after {_seconds(timeout) * 1000:.0f} ms, keys: {missing}")
            self._cv.wait(left)

    def set(self, key, value):
        self.calls.append(("set", key))
        if isinstance(value, str):
            value = value.encode()
        with self._cv:
            self._kv[key] = bytes(value)
            self._cv.notify_all()

    def get(self, key):
        self.calls.append(("get", key))
        with self._cv:
            self._wait_locked([key], self.timeout)
            return self._kv[key]

    def add(self, key, amount):
        with self._cv:
            v = int(self._kv.get(key, b"0")) + amount
            self._kv[key] = str(v).encode()
            self._cv.notify_all()
            return v

    def compare_set(self, key, expected, desired):
        with self._cv:
            cur = self._kv.get(key)
            if (cur is None and expected in (b"", "")) or cur == (expected.encode() if isinstance(expected, str) else expected):
                self._kv[key] = desired.encode() if isinstance(desired, str) else bytes(desired)
                self._cv.notify_all()
            return self._kv.get(key, expected)

    def wait(self, keys, timeout=None):
        self.calls.append(("wait", list(keys)))
        with self._cv:
            self._wait_locked(keys, self.timeout if timeout is None else timeout)

    def check(self, keys):
        self.calls.append(("check", list(keys)))
        with self._cv:
            return all(k in self._kv for k in keys)

    def delete_key(self, key):
        self.calls.append(("delete_key", key))
        with self._cv:
            return self._kv.pop(key, None) is not None

    def num_keys(self):
        with self._cv:
            return len(self._kv)

    def __repr__(self):
        return "DictStore()"


class StoreServer:
    """Serves `store` on 127.0.0.1 (an ephemeral port) until close()."""

    def __init__(self, store=None, authkey=b"kinet-test"):
        self.store = store if store is not None else DictStore()
        self.authkey = authkey
        self._listener = Listener(("127.0.0.1", 0), authkey=authkey)
        self.address = self._listener.address
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._closed:
            try:
                conn = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        with conn:
            while True:
                try:
                    method, args = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    reply = ("ok", getattr(self.store, method)(*args))
                except Exception as e:  # the client raises it again
                    reply = ("err", e)
                try:
                    conn.send(reply)
                except OSError:
                    return

    def close(self):
        self._closed = True
        self._listener.close()


class StoreClient:
    """torch.distributed.Store's methods, each a request to a StoreServer."""

    def __init__(self, address, authkey=b"kinet-test"):
        self._conn = Client(tuple(address), authkey=authkey)
        self._lock = threading.Lock()
        self.address = tuple(address)

    def _call(self, method, *args):
        with self._lock:
            self._conn.send((method, args))
            status, value = self._conn.recv()
        if status == "err":
            raise value
        return value

    def set(self, key, value):
        self._call("set", key, value)

    def get(self, key):
        return self._call("get", key)

    def add(self, key, amount):
        return self._call("add", key, amount)

    def wait(self, keys, timeout=None):
        self._call("wait", list(keys), timeout)

    def check(self, keys):
        return self._call("check", list(keys))

    def delete_key(self, key):
        return self._call("delete_key", key)

    def num_keys(self):
        return self._call("num_keys")

    def __repr__(self):
        return f"StoreClient({self.address[0]}:{self.address[1]})"


class FailingStore(DictStore):
    """A DictStore whose method `method` raises `exc`."""

    def __init__(self, method, exc):
        super().__init__()
        self._method, self._exc = method, exc

    def __getattribute__(self, name):
        if name != "_method" and name == object.__getattribute__(self, "_method"):
            exc = object.__getattribute__(self, "_exc")

            def fail(*args, **kwargs):
                raise exc

            return fail
        return object.__getattribute__(self, name)

    def __repr__(self):
        return f"FailingStore({self._method})"
