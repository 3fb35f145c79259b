#!/usr/bin/env bash
# Builds kinet-post-rate, runs the sweep (kinet and bare kernel, one run) and
# profiles the single-thread, one-warp and one-CTA rows of both with Nsight
# Compute (--ncu mode: the posting kernel alone against pre-written CQEs, as
# ncu serialises kernels). Everything lands in $OUT (default ./post_rate_out):
#   post_rate.txt/.json   the sweep            sass.txt.gz  every kernel's SASS
#   ncu_*.txt/.csv        the profile          gpu.txt      card, driver, clocks
# Usage (repository root, CUDA GPU): [OUT=dir] [THIRD_PARTY=dir] bench/profile_post_rate.sh
# (THIRD_PARTY: a folder with CLI/ and nlohmann/ where their packages are missing)
set -u
OUT=${OUT:-$PWD/post_rate_out}
B=${BUILD:-build}
mkdir -p "$OUT"
cmake -S . -B "$B" -G Ninja -DKINET_CUDA_ARCHITECTURES=90 -DKINET_BUILD_TESTS=OFF \
  -DKINET_THIRD_PARTY_INCLUDE="${THIRD_PARTY:-}" >"$OUT/cmake.log" 2>&1 || { tail -30 "$OUT/cmake.log"; exit 1; }
ninja -C "$B" kinet-post-rate >"$OUT/build.log" 2>&1 || { tail -60 "$OUT/build.log"; exit 1; }
X=$B/bench/kinet-post-rate
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.sm --format=csv >"$OUT/gpu.txt" 2>&1
git log -1 --format='%H %cI' >"$OUT/commit.txt" 2>/dev/null
cuobjdump -res-usage "$X" >"$OUT/res_usage.txt" 2>&1
cuobjdump -sass "$X" 2>&1 | gzip >"$OUT/sass.txt.gz"
timeout "${SWEEP_S:-200}" "$X" --json "$OUT/post_rate.json" --max-seconds 150 >"$OUT/post_rate.txt" 2>&1
echo "sweep rc=$?"
sed -n '/summary/,$p' "$OUT/post_rate.txt" | head -60
timeout "${NCU_S:-240}" ncu --section InstructionStats --section WarpStateStats --section SourceCounters \
  --section LaunchStats --metrics gpu__time_duration.sum -k 'regex:(k|b)_(thread|warp|cta)' \
  -o "$OUT/prof" -f "$X" --ncu 8192 --log-depth 14 --only g:single,g:warp,g:cta >"$OUT/ncu_run.txt" 2>&1
echo "ncu rc=$?"
tail -25 "$OUT/ncu_run.txt"
ncu -i "$OUT/prof.ncu-rep" --page details --print-details all >"$OUT/ncu_details.txt" 2>&1
ncu -i "$OUT/prof.ncu-rep" --page raw --csv >"$OUT/ncu_raw.csv" 2>&1
ncu -i "$OUT/prof.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu_source.csv" 2>&1
gzip -f "$OUT/ncu_source.csv" "$OUT/ncu_raw.csv" 2>/dev/null
ls -la "$OUT"
