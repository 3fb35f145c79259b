#!/usr/bin/env python3
"""Plot kinet-comm-perf GPU runs: put bandwidth beside cudaMemcpy, and the ratio.

    kinet-comm-perf --mode gpu --only bw --json run1.json     # one or more runs
    python3 bench/comm/plot.py run1.json run2.json [-o comm-bw.png]

Two panels, every run drawn (several runs show the spread between them):
  1. GB/s (10^9 bytes/s, log-log) against bytes: kinet's cta_put as launched
     for the headline figure (solid; PDL where the run used it), the same
     kernel in plain stream order when the run measured it too (dotted), and
     cudaMemcpyAsync device-to-device of the same bytes (dashed);
  2. kinet / cudaMemcpy per size for both launches, with the goal (0.9).
A run's put_signal ping-pong (if any) goes in a third panel: half round trip
(us) against bytes, one line per group (thread, warp, CTA).
"""
import argparse
import json
import os
import sys

GOAL = 0.9  # issue 11: kinet / cudaMemcpy from 1 MiB up


def size_label(n):
    for unit, div in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def load(path):
    with open(path) as f:
        doc = json.load(f)
    if doc.get("tool") != "kinet-comm-perf" or doc.get("mode") != "gpu":
        sys.exit(f"{path}: not a kinet-comm-perf --mode gpu report")
    return doc


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by kinet-comm-perf --mode gpu --json")
    ap.add_argument("-o", "--output", default="comm-bw.png", help="PNG to write (default comm-bw.png)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib (Debian: apt-get install python3-matplotlib)")

    docs = [(p, load(p)) for p in args.json]
    lat = any(d.get("pingpong") for _, d in docs)
    fig, axes = plt.subplots(3 if lat else 2, 1, figsize=(8, 11 if lat else 8),
                             gridspec_kw={"height_ratios": [3, 2, 3] if lat else [3, 2]})
    bw, ratio = axes[0], axes[1]
    sizes = set()
    for i, (path, doc) in enumerate(docs):
        rows = sorted(doc.get("put_bw", []), key=lambda r: r["bytes"])
        if not rows:
            continue
        x = [r["bytes"] for r in rows]
        sizes.update(x)
        launch = doc.get("config", {}).get("bw_launch", "plain")
        head = "kinet cta_put (PDL)" if launch.startswith("pdl") else "kinet cta_put"
        first = i == 0
        bw.plot(x, [r["kinet_GBps"] for r in rows], "-o", color="tab:blue", ms=3, alpha=0.8,
                label=head if first else None)
        bw.plot(x, [r["cudaMemcpy_GBps"] for r in rows], "--", color="tab:grey", alpha=0.8,
                label="cudaMemcpyAsync D2D" if first else None)
        ratio.plot(x, [r["ratio"] for r in rows], "-o", color="tab:blue", ms=3, alpha=0.8,
                   label=head if first else None)
        if any("kinet_plain_GBps" in r for r in rows):
            px = [r["bytes"] for r in rows if "kinet_plain_GBps" in r]
            bw.plot(px, [r["kinet_plain_GBps"] for r in rows if "kinet_plain_GBps" in r], ":", color="tab:orange",
                    alpha=0.8, label="kinet cta_put, plain launch" if first else None)
            ratio.plot(px, [r["plain_ratio"] for r in rows if "plain_ratio" in r], ":o", color="tab:orange", ms=2,
                       alpha=0.8, label="plain launch" if first else None)
    ticks = sorted(sizes)
    for ax in (bw, ratio):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks)
        ax.set_xticklabels([size_label(t) for t in ticks], fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
    bw.set_yscale("log")
    bw.set_ylabel("GB/s (10^9 bytes/s)")
    if bw.get_legend_handles_labels()[0]:
        bw.legend(fontsize=8)
    ratio.axhline(GOAL, color="green", lw=1, ls=":", label=f"goal {GOAL}")
    ratio.axhline(1.0, color="grey", lw=0.8)
    ratio.set_ylabel("kinet / cudaMemcpy")
    ratio.set_xlabel("bytes per put")
    ratio.legend(fontsize=8)
    doc0 = docs[0][1]
    gpu = doc0.get("gpu", {})
    bw.set_title(f"kinet-comm-perf put bandwidth, 2 processes on one {gpu.get('name', 'GPU')} "
                 f"(path {doc0.get('path', '?')}), {len(docs)} run(s)\n"
                 f"{doc0.get('timestamp_utc', '')} {os.path.basename(docs[0][0])}", fontsize=9)
    if lat:
        ax = axes[2]
        colours = {"thread": "tab:red", "warp": "tab:purple", "cta": "tab:green"}
        for i, (_, doc) in enumerate(docs):
            groups = {}
            for r in doc.get("pingpong", []):
                groups.setdefault(r["group"], []).append(r)
            for g, rows in sorted(groups.items()):
                rows.sort(key=lambda r: r["bytes"])
                ax.plot([r["bytes"] for r in rows], [r["half_rtt_us_median"] for r in rows], "-o", ms=3,
                        color=colours.get(g), label=g if i == 0 else None)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("bytes per put_signal")
        ax.set_ylabel("half round trip (us)")
        ax.set_title("put_signal ping-pong", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
