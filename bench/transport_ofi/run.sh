#!/usr/bin/env bash
# The libfabric baseline and Transport over "ofi" on loopback, one after the
# other on the same machine (the issue's item 5, libfabric row). Needs
# libfabric-bin (fi_pingpong) and a CPU build of kinet in $BUILD (default build/).
#   bench/transport_ofi/run.sh [iterations]
# Baseline: fi_pingpong over the same provider and endpoint type kinet uses
# (tcp;ofi_rxm, FI_EP_RDM), server and client on 127.0.0.1, per size:
#   fi_pingpong -p tcp -e rdm -I N -S SIZE -B PORT            (server)
#   fi_pingpong -p tcp -e rdm -I N -S SIZE -P PORT 127.0.0.1  (client)
# Its "usec/xfer" is per one-way transfer (two transfers per iteration), so
# compare it with kinet's half round trip; "MB/sec" with kinet's MiB/s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
iters=${1:-2000}
export FI_PROVIDER=${FI_PROVIDER:-tcp}
bin=$build/kinet-ofi-pingpong
if [[ ! -x $bin || $here/kinet_ofi_pingpong.cpp -nt $bin ]]; then
  ninja -C "$build" kinet >/dev/null
  c++ -std=c++20 -O2 -I"$root/include" -I"$build/include" "$here/kinet_ofi_pingpong.cpp" "$build/libkinet.a" \
      -ldl -lpthread -o "$bin"
fi
echo "# $(date -u +%FT%TZ) $(uname -n) $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# fi_pingpong -p tcp -e rdm (libfabric $(fi_info --version 2>/dev/null | awk '/libfabric:/{print $2}'))"
port=47800
for s in 8 64 1024 4096 16384 65536 1048576 4194304; do
  port=$((port + 1))
  timeout 120 fi_pingpong -p tcp -e rdm -I "$iters" -S "$s" -B "$port" >/dev/null 2>&1 &
  srv=$!
  sleep 0.3
  timeout 120 fi_pingpong -p tcp -e rdm -I "$iters" -S "$s" -P "$port" 127.0.0.1 2>&1 | awk 'NR>1 && NF>=8'
  wait "$srv" || true
done
echo "# kinet Transport over ofi (put completion = one round trip)"
"$bin" "$iters"
