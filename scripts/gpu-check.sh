#!/usr/bin/env bash
# Builds kinet on a GPU machine and runs the GPU tests and GPU benchmarks.
# Usage: scripts/gpu-check.sh [OUTDIR]      (OUTDIR gets logs and JSON; default build/gpu-out)
# Steps can be skipped: SKIP_SANITIZER=1, SKIP_BENCH=1, SKIP_HOST_SUITE=1. At most 8 files land in OUTDIR when SKIP_HOST_SUITE=1. GoogleTest is needed only for the
# host test suite: put its source in .deps/googletest (or set KINET_GTEST_SOURCE_DIR).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/gpu-out}
mkdir -p "$out"
export KINET_GTEST_SOURCE_DIR=${KINET_GTEST_SOURCE_DIR:-$PWD/.deps/googletest}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | cat
tests=ON
[ -f "$KINET_GTEST_SOURCE_DIR/CMakeLists.txt" ] || tests=OFF
host_suite=$tests
[ -n "${SKIP_HOST_SUITE:-}" ] && host_suite=OFF
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINET_CUDA=ON \
  -DKINET_CUDA_ARCHITECTURES=90 -DKINET_BUILD_TESTS=$tests > "$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
targets="kinet kinet-perf"
[ "$tests" = ON ] && targets="$targets kinet-gpu-tests"
[ -f bench/CMakeLists.txt ] && targets="$targets kinet-post-rate"
cmake --build build-gpu -j "$(nproc)" --target $targets >> "$out/build.log" 2>&1 || { grep -E "error" -A3 "$out/build.log" | head -60; exit 1; }
echo "== GPU targets built"
rc=0
if [ "$host_suite" = ON ]; then  # the host suite; its failure to build is reported, the GPU steps still run
  cmake --build build-gpu -j "$(nproc)" >> "$out/build.log" 2>&1 || { echo "host suite build FAILED"; grep -E "error" -A3 "$out/build.log" | head -30; host_suite=FAILED; rc=1; }
fi
gt=build-gpu/tests/gpu/kinet-gpu-tests
if [ ! -x "$gt" ]; then  # host tests off: build the GPU test binary alone
  nvcc -std=c++20 --expt-relaxed-constexpr -arch=sm_90 -O2 -Iinclude tests/gpu/gpu_verbs_test.cu \
    build-gpu/libkinet.a -ldl -lpthread -cudart shared -o build-gpu/kinet-gpu-tests && gt=build-gpu/kinet-gpu-tests
fi
echo "== GPU tests"; $gt 2>&1 | tee "$out/gpu-tests.log"; rc=$((rc | PIPESTATUS[0]))
if [ "$host_suite" = ON ]; then
  echo "== host test suite (ctest)"; ctest --test-dir build-gpu -LE gpu --output-on-failure -j 8 > "$out/ctest.log" 2>&1; r=$?
  tail -5 "$out/ctest.log"; rc=$((rc | r))
fi
if [ -z "${SKIP_SANITIZER:-}" ]; then  # the whole GPU suite under each tool
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool"
    echo "== $tool" >> "$out/sanitizer.log"
    timeout -k 10 200 compute-sanitizer --tool $tool --error-exitcode 3 $gt > build-gpu/sanitizer-$tool.log 2>&1; r=$?
    grep -E "FAILED|tests passed|ERROR SUMMARY|RACECHECK SUMMARY" build-gpu/sanitizer-$tool.log | tee -a "$out/sanitizer.log"
    echo "exit $r" | tee -a "$out/sanitizer.log"; rc=$((rc | r))
  done
fi
if [ -z "${SKIP_BENCH:-}" ]; then
  # kinet-perf --gpu: kernels post through emu, GPU 0 -> GPU 1. Each WQE on GPU
  # memory costs ~17 us in emu: the sweep (2 B .. 1 MiB, 1000 iterations per
  # size, ~20k WQEs per test) takes a few seconds, the warp and CTA runs below
  # 1 s each; `timeout` only bounds a hang.
  echo "== kinet-perf --gpu (tables in perf-gpu.log)"
  timeout -k 10 240 build-gpu/tools/kinet-perf --gpu --test write_lat,write_bw,read_bw,atomic_lat --sweep \
    --iters 1000 --json "$out/perf-gpu.json" > "$out/perf-gpu.log" 2>&1; r=$?; rc=$((rc | r)); echo "sweep exit $r"
  for extra in "--gpu-threads 32" "--gpu-threads 256 --tx-depth 512" "--rings gpu"; do
    echo "== kinet-perf --gpu --test write_lat,write_bw --size 4K $extra" >> "$out/perf-gpu.log"
    timeout -k 10 120 build-gpu/tools/kinet-perf --gpu --test write_lat,write_bw --size 4K $extra >> "$out/perf-gpu.log" 2>&1
    r=$?; rc=$((rc | r)); echo "$extra: exit $r"
  done
  grep -E "^ *[0-9]+ +[0-9]+ +[0-9.]+" "$out/perf-gpu.log" | tail -12
  if [ -x build-gpu/bench/kinet-post-rate ]; then
    echo "== kinet-post-rate"
    build-gpu/bench/kinet-post-rate ${POST_RATE_ARGS:-} --json "$out/post-rate.json" > "$out/post-rate.log" 2>&1; r=$?
    tail -45 "$out/post-rate.log"; rc=$((rc | r))
    python3 bench/plot_post_rate.py "$out/post-rate.json" -o "$out/post-rate.png" || echo "plot failed (matplotlib?)"
  fi
fi
echo "== gpu-check exit $rc"
exit $rc
