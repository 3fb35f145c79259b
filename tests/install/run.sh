#!/usr/bin/env bash
# Installs a built kinet into a temporary prefix and builds the consumer in
# tests/install/consumer against it twice: with find_package(kinet) and with
# pkg-config. Each consumer must run and see its put arrive.
#   tests/install/run.sh BUILD_DIR WORK_DIR     (BUILD_DIR fully built)
set -euo pipefail
build=$(realpath "$1")
work=$(realpath -m "$2")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$work/prefix" >"$work/install.log"
echo "installed into $work/prefix: $(find "$work/prefix" -type f | wc -l) files"

echo "--- consumer with find_package(kinet)"
cmake -S "$here/consumer" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" >"$work/cmake.log"
cmake --build "$work/cmake" >>"$work/cmake.log"
"$work/cmake/consumer"

echo "--- consumer with pkg-config"
pc=$(find "$work/prefix" -name kinet.pc -print -quit)
[ -n "$pc" ] || { echo "kinet.pc was not installed" >&2; exit 1; }
export PKG_CONFIG_PATH="$(dirname "$pc")"
# shellcheck disable=SC2046  # pkg-config's flags are meant to split
${CXX:-c++} -std=c++20 "$here/consumer/main.cpp" -o "$work/consumer-pc" $(pkg-config --cflags --libs kinet)
"$work/consumer-pc"
