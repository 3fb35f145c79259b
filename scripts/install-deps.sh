#!/usr/bin/env bash
# Installs what kinet's build, tools and tests need on Debian 12 / Ubuntu, if
# missing: compilers and build tools (ccache and lld are used when present), rdma-core's
# headers (the wire-layout test requires mlx5dv.h), GoogleTest, CLI11 and
# nlohmann-json (tools), pkg-config (the install check).
# CUDA (nvcc) is optional: without it the .cu files are skipped and GPU tests report as skipped.
set -euo pipefail
pkgs=(cmake ninja-build g++ ccache pkg-config libgtest-dev libibverbs-dev libcli11-dev nlohmann-json3-dev python3)
pkgs+=(lld)  # a faster linker; .ci/run links with it (KINET_LINKER=lld) when installed: an ASan test binary 1.6 -> 0.7 s
pkgs+=(libucx-dev ucx-utils)  # the UCX transport channel (headers; libucp.so.0 loaded at run time), ucx_perftest (bench/transport)
pkgs+=(libfabric-dev)  # transport "ofi": headers to build, libfabric.so.1 (dlopen) for its tests
pkgs+=(python3-dev pybind11-dev)  # the Python module (python/, docs/PYTHON.md)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "kinet: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "kinet: build dependencies already installed"
fi
if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "kinet: CUDA compiler found: .cu files will be built"
else
  echo "kinet: no CUDA compiler: .cu files will be skipped (the software NIC needs none)"
fi
