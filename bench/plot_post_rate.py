#!/usr/bin/env python3
"""Plot kinet-post-rate results.

    kinet-post-rate --json post_rate.json
    python3 bench/plot_post_rate.py post_rate.json [-o post_rate.png]

One PNG with three panels:
  1. heatmap of the warp-coop CTA x QP table (M WQE/s, log colour scale),
  2. the same table as lines (one line per QP count, x = CTAs),
  3. horizontal bars of every other row (per-mode and whole-GPU rows): kinet's
     verbs, and beside each the bare kernel of the same run (hollow bar) with
     the ratio kinet / bare.
Rows that were skipped are left out; rows that failed verification are drawn
hatched/red and marked "FAIL".
"""
import argparse
import json
import math
import os
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    rows = doc.get("rows", [])
    if not rows:
        sys.exit(f"{path}: no rows")
    return doc, rows


def row_label(r):
    thr = r["threads_per_cta"]
    return (f'{r["mode"]} [{r["sharing"]}] {r["ctas"]}x{thr}thr '
            f'{r["qps"]}qp db{r["doorbell_batch"]}')


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="file written by kinet-post-rate --json")
    ap.add_argument("-o", "--out", help="PNG to write (default: JSON name with .png)")
    ap.add_argument("--dpi", type=int, default=130)
    args = ap.parse_args()

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.colors import LogNorm
        import numpy as np
    except ImportError as e:
        sys.exit(f"matplotlib/numpy needed: {e}")

    doc, rows = load(args.json)
    out = args.out or os.path.splitext(args.json)[0] + ".png"
    ran = [r for r in rows if r.get("ran") and r.get("mwqe_per_s", 0) > 0]
    table = [r for r in ran if r.get("table")]
    others = [r for r in ran if not r.get("table")]

    fig = plt.figure(figsize=(18, 11))
    gs = fig.add_gridspec(2, 2, height_ratios=[1, 1.15])
    title = (f'kinet-post-rate on {doc.get("device", "?")} ({doc.get("sms", "?")} SMs), {doc.get("date_utc", "")}: '
             f'mlx5 WQEs built + published per second by kernels, no NIC')
    p = doc.get("params", {})
    fig.suptitle(title + f'\nring depth {p.get("ring_depth")}, signal period {p.get("signal_period")}, '
                 f'median of {p.get("reps")} runs', fontsize=12)

    # ---- 1 + 2: CTA x QP table ----
    ax_h = fig.add_subplot(gs[0, 0])
    ax_l = fig.add_subplot(gs[0, 1])
    if table:
        ctas = sorted({r["ctas"] for r in table})
        qps = sorted({r["qps"] for r in table})
        grid = np.full((len(ctas), len(qps)), np.nan)
        share = {}
        bad = set()
        for r in table:
            i, j = ctas.index(r["ctas"]), qps.index(r["qps"])
            grid[i, j] = r["mwqe_per_s"]
            share[(i, j)] = r["sharing"][0]
            if not r.get("verified"):
                bad.add((i, j))
        finite = grid[np.isfinite(grid)]
        norm = LogNorm(vmin=max(finite.min(), 1e-3), vmax=finite.max()) if finite.size else None
        im = ax_h.imshow(grid, origin="lower", cmap="viridis", norm=norm, aspect="auto")
        ax_h.set_xticks(range(len(qps)), [str(q) for q in qps])
        ax_h.set_yticks(range(len(ctas)), [str(c) for c in ctas])
        ax_h.set_xlabel("QPs")
        wpc = p.get("warps_per_cta_table", 8)
        ax_h.set_ylabel(f"CTAs ({wpc} warps each)")
        ax_h.set_title("warp-coop M WQE/s (e exclusive, c CTA-shared, g GPU-shared QPs)")
        for (i, j), s in share.items():
            v = grid[i, j]
            txt = (f"{v:.0f}" if v >= 10 else f"{v:.1f}") + s + ("\nFAIL" if (i, j) in bad else "")
            lum = norm(v) if norm else 0.5
            ax_h.text(j, i, txt, ha="center", va="center", fontsize=7,
                      color="black" if lum > 0.6 else "white")
        fig.colorbar(im, ax=ax_h, label="M WQE/s")

        for j, q in enumerate(qps):
            xs = [c for i, c in enumerate(ctas) if np.isfinite(grid[i, j])]
            ys = [grid[i, j] for i, c in enumerate(ctas) if np.isfinite(grid[i, j])]
            if xs:
                ax_l.plot(xs, ys, marker="o", label=f"{q} QPs")
        ax_l.set_xscale("log", base=2)
        ax_l.set_yscale("log")
        ax_l.set_xlabel("CTAs")
        ax_l.set_ylabel("M WQE/s")
        ax_l.set_title("warp-coop scaling with CTAs, one line per QP count")
        ax_l.axhline(4000, color="red", ls="--", lw=1)
        ax_l.text(ctas[0], 4000, " 4 G WQE/s whole-GPU goal", color="red", va="bottom", fontsize=8)
        ax_l.grid(True, which="both", alpha=0.3)
        ax_l.legend(fontsize=8, ncol=2)
    else:
        for ax in (ax_h, ax_l):
            ax.text(0.5, 0.5, "no CTA x QP table rows", ha="center", va="center")
            ax.set_axis_off()

    # ---- 3: per-mode bars ----
    ax_b = fig.add_subplot(gs[1, :])
    if others:
        labels = [row_label(r) for r in others]
        vals = [r["mwqe_per_s"] for r in others]
        colors = []
        palette = {"single": "tab:gray", "warp": "tab:blue", "cta": "tab:orange",
                   "gpu-shared": "tab:purple", "whole-gpu": "tab:green"}
        for r in others:
            colors.append("red" if not r.get("verified") else palette.get(r["group"], "tab:cyan"))
        y = np.arange(len(others))
        has_bare = any(r.get("bare", {}).get("mwqe_per_s", 0) > 0 for r in others)
        h = 0.4 if has_bare else 0.8
        bars = ax_b.barh(y - (h / 2 if has_bare else 0), vals, height=h, color=colors)
        if has_bare:  # the bare kernel of the same run, hollow, just below kinet's bar
            bvals = [r.get("bare", {}).get("mwqe_per_s", 0) or np.nan for r in others]
            ax_b.barh(y + h / 2, bvals, height=h, fill=False, edgecolor="black", lw=0.7, label="bare kernel")
            ax_b.legend(fontsize=8, loc="lower right")
        for b, r in zip(bars, others):
            if not r.get("verified"):
                b.set_hatch("//")
        ax_b.set_yticks(y, labels, fontsize=7)
        ax_b.invert_yaxis()
        ax_b.set_xscale("log")
        ax_b.set_xlabel("M WQE/s (log)")
        ax_b.set_title("per-mode rows, kinet (grey single thread, blue warp, orange CTA, purple GPU-shared, "
                       "green whole GPU; red = FAILED verification) and bare kernel (hollow), same run")
        ax_b.axvline(4000, color="red", ls="--", lw=1)  # whole-GPU goal
        for yi, (v, r) in enumerate(zip(vals, others)):
            # >= 80% of the retire kernel's passes found a full chunk waiting:
            # the NIC stand-in, not the posting code, set that row's pace.
            bound = r.get("retire_full_pass_pct", 0) >= 80
            ratio = r.get("ratio")
            bare = r.get("bare", {}).get("mwqe_per_s", 0)
            ax_b.text(max(v, bare or 0) * 1.03, yi, (f"{v:.0f}" if v >= 10 else f"{v:.2f}") +
                      (f"  (bare {bare:.3g}, ratio {ratio:.2f})" if ratio else "") +
                      (" (retire-bound)" if bound else "") +
                      ("" if r.get("verified") else "  FAIL"), va="center", fontsize=7)
        ax_b.grid(True, axis="x", which="both", alpha=0.3)
    else:
        ax_b.text(0.5, 0.5, "no per-mode rows", ha="center", va="center")
        ax_b.set_axis_off()

    fig.tight_layout(rect=[0, 0, 1, 0.95])
    fig.savefig(out, dpi=args.dpi)
    best = max(ran, key=lambda r: r["mwqe_per_s"]) if ran else None
    print(f"wrote {out}" + (f"; best {best['mwqe_per_s']:.0f} M WQE/s ({row_label(best)})" if best else ""))


if __name__ == "__main__":
    main()
