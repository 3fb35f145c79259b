"""One rank of test_multiproc.py / test_torch_store.py, in its own process.

    python3 rank_worker.py '<json config>'

Config: rank, nranks, prefix, timeout (seconds), store: {"kind": "server",
"address": [host, port]} (a pystore.StoreServer), {"kind": "file", "path": p}
(kinet.FileStore) or {"kind": "torch", "host": h, "port": p} (a
torch.distributed.TCPStore client); comm: kwargs of kinet.Comm, or absent.
Prints one JSON line: what the rank saw (allgather, broadcast, ring, and the
Comm's paths), or {"error", "code", "cause", "elapsed"} with exit status 3
when kinet raised.
"""
import datetime
import json
import sys
import time

import kinet


def open_store(cfg):
    kind = cfg["kind"]
    if kind == "server":
        from pystore import StoreClient

        return StoreClient(cfg["address"])
    if kind == "file":
        return kinet.FileStore(cfg["path"])
    if kind == "torch":
        import torch.distributed as dist

        return dist.TCPStore(cfg["host"], cfg["port"], is_master=False,
                             timeout=datetime.timedelta(seconds=cfg.get("store_timeout", 60)))
    raise ValueError(f"store kind {kind}")


def main():
    cfg = json.loads(sys.argv[1])
    r, n = cfg["rank"], cfg["nranks"]
    t0 = time.monotonic()
    try:
        store = open_store(cfg["store"])
        b = kinet.Bootstrap.from_store(store, r, n, prefix=cfg["prefix"], timeout=cfg["timeout"])
        out = {"rank": b.rank, "nranks": b.nranks}
        out["allgather"] = [v.hex() for v in b.allgather(f"rank {r} ".encode() * (r + 1))]
        b.barrier()
        out["broadcast"] = b.broadcast(b"root says hi" if r == n - 1 else None, root=n - 1).hex()
        if n > 1:
            b.send((r + 1) % n, 5, f"{r}->{(r + 1) % n}".encode())
            out["ring"] = b.recv((r - 1) % n, 5).decode()
        if "comm" in cfg:
            comm = kinet.Comm(b, **cfg["comm"])
            out["comm"] = {"rank": comm.rank, "size": comm.size, "gpu": comm.gpu, "paths": comm.paths(),
                           "report": comm.describe_paths(), "transport": comm.transport}
            comm.barrier()  # no rank drops its Comm while a peer still sets up
            del comm
        b.barrier()
    except kinet.Error as e:
        print(json.dumps({"error": str(e), "code": e.code, "elapsed": time.monotonic() - t0,
                          "cause": repr(e.__cause__) if e.__cause__ is not None else None}))
        sys.exit(3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
