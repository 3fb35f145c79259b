#!/usr/bin/env python3
"""Plot cross-process kinet-perf runs (bench/xproc/run.sh) beside their TCP baseline.

    bench/xproc/run.sh --test write_bw,read_bw --sweep --max-size 1M   # writes xproc-*.json
    python3 bench/xproc/plot.py xproc-netns.json xproc-loopback.json [-o xproc.png]

One column per JSON file (a run: two namespaces, or loopback), two rows:
  1. bandwidth (MB/s, log-log) against message size: kinet (solid) and the
     plain TCP stream of the same run (dashed), one colour per test;
  2. the ratio kinet / TCP per size, with the goal (0.8) as a line.
Latency tests in the files are left out (their sizes are single points).
"""
import argparse
import json
import os
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    runs = {}
    for r in doc.get("results", []):
        if "bw_MB_per_s" not in r or "tcp" not in r:
            continue
        runs.setdefault(r["test"], []).append(r)
    if not runs:
        sys.exit(f"{path}: no bandwidth results beside a TCP baseline")
    for rows in runs.values():
        rows.sort(key=lambda r: r["size"])
    return doc, runs


def size_label(n):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div}{unit}"
    return str(n)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", nargs="+", help="files written by kinet-perf --client ... --json")
    ap.add_argument("-o", "--output", default="xproc.png", help="PNG to write (default xproc.png)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("plot.py needs matplotlib (Debian: apt-get install python3-matplotlib)")

    docs = [(p, *load(p)) for p in args.json]
    fig, axes = plt.subplots(2, len(docs), figsize=(6.5 * len(docs), 8), squeeze=False,
                             gridspec_kw={"height_ratios": [3, 2]})
    colours = {"write_bw": "tab:blue", "read_bw": "tab:orange"}
    goal = None
    for col, (path, doc, runs) in enumerate(docs):
        bw, ratio = axes[0][col], axes[1][col]
        goal = doc.get("goals", {}).get("bandwidth_ratio_min", goal)
        for test, rows in sorted(runs.items()):
            c = colours.get(test)
            x = [r["size"] for r in rows]
            pl = rows[0].get("post_list", 1)
            bw.plot(x, [r["bw_MB_per_s"] for r in rows], "-o", color=c, ms=3,
                    label=f"kinet {test}" + (f" (post list {pl})" if pl > 1 else ""))
            bw.plot(x, [r["tcp"]["bw_MB_per_s"] for r in rows], "--", color=c, alpha=0.7, label=f"TCP stream ({test})")
            ratio.plot(x, [r["ratio_kinet_over_tcp"] for r in rows], "-o", color=c, ms=3, label=test)
        stamp = doc.get("timestamp_utc", "")
        host = doc.get("machine", {}).get("hostname", "") if isinstance(doc.get("machine"), dict) else ""
        bw.set_title(f"{os.path.basename(path)}\n{stamp} {host}".strip(), fontsize=9)
        for ax in (bw, ratio):
            ax.set_xscale("log", base=2)
            ticks = sorted({r["size"] for rows in runs.values() for r in rows})
            ax.set_xticks(ticks[::2])
            ax.set_xticklabels([size_label(t) for t in ticks[::2]], fontsize=7)
            ax.grid(True, which="both", alpha=0.3)
        bw.set_yscale("log")
        bw.set_ylabel("MB/s (2^20 bytes)")
        bw.legend(fontsize=7)
        if goal:
            ratio.axhline(goal, color="green", lw=1, ls=":", label=f"goal {goal}")
        ratio.axhline(1.0, color="grey", lw=0.8)
        ratio.set_ylabel("kinet / TCP")
        ratio.set_xlabel("message size (bytes)")
        ratio.legend(fontsize=7)
    fig.suptitle("kinet cross-process software NIC over TCP beside a plain TCP stream (kinet-perf --client)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
