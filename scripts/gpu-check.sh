#!/usr/bin/env bash
# Builds kinet on any machine with a CUDA GPU and nvcc, then runs the GPU test
# suite, the same suite under compute-sanitizer (memcheck, racecheck), the host
# test suite and the GPU benchmarks. One GPU is enough; with two or more the
# tests move data GPU 0 -> GPU 1 as well.
#
# Usage: scripts/gpu-check.sh [OUTDIR]      (logs and JSON; default build-gpu/out)
# Environment:
#   BUILD_DIR=build-gpu   build directory
#   CUDA_ARCH=native      GPU architectures to build for (e.g. 90, "80;90")
#   KINET_GTEST_SOURCE_DIR  GoogleTest sources, when none is installed (the
#                         GPU suite needs none; without GoogleTest the host
#                         suite is skipped)
#   SKIP_HOST_SUITE=1, SKIP_SANITIZER=1, SKIP_BENCH=1   leave a step out
#   SANITIZER_TIMEOUT=300 seconds per compute-sanitizer tool
# Exit status: 0 when every step that ran passed.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-build-gpu/out}
bd=${BUILD_DIR:-build-gpu}
arch=${CUDA_ARCH:-native}
mkdir -p "$out"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | cat

# GoogleTest: installed, or sources in KINET_GTEST_SOURCE_DIR / .deps/googletest / /usr/src/googletest.
gtest_src=${KINET_GTEST_SOURCE_DIR:-}
[ -z "$gtest_src" ] && [ -f .deps/googletest/CMakeLists.txt ] && gtest_src=$PWD/.deps/googletest
tests=OFF
if [ -n "$gtest_src" ] && [ -f "$gtest_src/CMakeLists.txt" ]; then
  export KINET_GTEST_SOURCE_DIR=$gtest_src
  tests=ON
elif [ -f /usr/src/googletest/CMakeLists.txt ] || ls /usr/lib*/cmake/GTest /usr/lib/*/cmake/GTest > /dev/null 2>&1; then
  tests=ON
fi
host_suite=$tests
[ -n "${SKIP_HOST_SUITE:-}" ] && host_suite=OFF

# Without GoogleTest the host suite is off; tests/gpu is built all the same.
cmake -S . -B "$bd" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKINET_CUDA=ON \
  "-DKINET_CUDA_ARCHITECTURES=$arch" -DKINET_BUILD_TESTS=$tests > "$out/build.log" 2>&1 ||
  { tail -30 "$out/build.log"; exit 1; }
gpu_targets=$(sed -n 's/^kinet_gpu_test([a-z_.]* \(kinet-gpu-[a-z0-9-]*\) .*/\1/p' tests/gpu/CMakeLists.txt | tr '\n' ' ')
targets="kinet $gpu_targets"
[ -z "${SKIP_BENCH:-}" ] && targets="$targets kinet-perf" && [ -f bench/CMakeLists.txt ] && targets="$targets kinet-post-rate"
cmake --build "$bd" -j "$(nproc)" --target $targets >> "$out/build.log" 2>&1 ||
  { grep -E "error" -A3 "$out/build.log" | head -60; exit 1; }
gt=$bd/tests/gpu/kinet-gpu-tests
echo "== built ($targets)"

# Every test labelled gpu (tests/gpu/CMakeLists.txt): the verbs, their device
# contracts, two processes, the proxy, the communicator (2 and 4 ranks). Each
# exits 77 without a GPU, which ctest reports as skipped.
rc=0
echo "== GPU tests (ctest -L gpu)"
ctest --test-dir "$bd" -L gpu --output-on-failure > "$out/gpu-tests.log" 2>&1; r=$?
grep -E "Test +#|tests passed|Skipped|Failed" "$out/gpu-tests.log"
rc=$((rc | r))

if [ -z "${SKIP_SANITIZER:-}" ]; then  # the whole GPU suite under each tool
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer --tool $tool"
    timeout -k 10 "${SANITIZER_TIMEOUT:-300}" compute-sanitizer --tool $tool --error-exitcode 3 "$gt" \
      > "$out/sanitizer-$tool.log" 2>&1; r=$?
    grep -E "FAILED|tests passed|ERROR SUMMARY|RACECHECK SUMMARY" "$out/sanitizer-$tool.log"
    [ "$r" = 124 ] && echo "timed out after ${SANITIZER_TIMEOUT:-300} s"
    echo "exit $r"; rc=$((rc | r))
  done
fi

if [ "$host_suite" = ON ]; then  # the host suite; a failure to build it is reported, not fatal to the rest
  echo "== host test suite (ctest -LE gpu)"
  if cmake --build "$bd" -j "$(nproc)" >> "$out/build.log" 2>&1; then
    ctest --test-dir "$bd" -LE gpu --output-on-failure -j "$(nproc)" > "$out/ctest.log" 2>&1; r=$?
    tail -5 "$out/ctest.log"; rc=$((rc | r))
  else
    echo "host suite build FAILED"; grep -E "error" -A3 "$out/build.log" | head -30; rc=1
  fi
fi

if [ -z "${SKIP_BENCH:-}" ]; then
  # kinet-perf --gpu: kernels post through emu (GPU 0 -> GPU 1 when there are
  # two). A few seconds each; `timeout` only bounds a hang.
  echo "== kinet-perf --gpu (tables in $out/perf-gpu.log)"
  timeout -k 10 240 "$bd/tools/kinet-perf" --gpu --test write_lat,write_bw,read_bw,atomic_lat --sweep \
    --iters 1000 --json "$out/perf-gpu.json" > "$out/perf-gpu.log" 2>&1; r=$?; rc=$((rc | r)); echo "sweep exit $r"
  for extra in "--gpu-threads 32" "--gpu-threads 256 --tx-depth 512" "--rings gpu"; do
    echo "== kinet-perf --gpu --test write_lat,write_bw --size 4K $extra" >> "$out/perf-gpu.log"
    timeout -k 10 120 "$bd/tools/kinet-perf" --gpu --test write_lat,write_bw --size 4K $extra >> "$out/perf-gpu.log" 2>&1
    r=$?; rc=$((rc | r)); echo "$extra: exit $r"
  done
  if [ -x "$bd/bench/kinet-post-rate" ]; then
    echo "== kinet-post-rate"
    "$bd/bench/kinet-post-rate" ${POST_RATE_ARGS:-} --json "$out/post-rate.json" > "$out/post-rate.log" 2>&1; r=$?
    tail -45 "$out/post-rate.log"; rc=$((rc | r))
    python3 bench/plot_post_rate.py "$out/post-rate.json" -o "$out/post-rate.png" || echo "plot skipped (matplotlib?)"
  fi
fi
echo "== gpu-check exit $rc"
exit $rc
