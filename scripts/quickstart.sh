#!/usr/bin/env bash
# Quick start: install what is missing, build, and run kinet's main demo:
# kinet-perf measuring write latency and bandwidth between two endpoints on
# the built-in software NIC (no GPU, no RDMA NIC needed).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake --preset default >/dev/null
cmake --build --preset default --target kinet-perf kinet-info
./build/tools/kinet-info
./build/tools/kinet-perf --demo --json build/kinet-perf-demo.json
echo "results: build/kinet-perf-demo.json"
