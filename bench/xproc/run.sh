#!/usr/bin/env bash
# Cross-process kinet-perf with its plain TCP baseline, twice:
#   1. between two network namespaces joined by a veth pair (needs root),
#   2. between two processes on loopback.
# Usage: bench/xproc/run.sh [kinet-perf client options]   (default: --sweep --max-size 1M)
# Environment: KINET_PERF (binary, default build/tools/kinet-perf), OUT_DIR (JSON
# reports xproc-netns.json / xproc-loopback.json, default .), PORT (default 18515).
# The namespaces and the veth pair are removed on exit, whatever happens.
# Plot the two reports: bench/xproc/plot.py xproc-netns.json xproc-loopback.json -o xproc.png
set -euo pipefail
PERF=$(realpath "${KINET_PERF:-build/tools/kinet-perf}")
OUT=${OUT_DIR:-.}
PORT=${PORT:-18515}
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--sweep --max-size 1M)
[ -x "$PERF" ] || { echo "run.sh: no kinet-perf at $PERF (build it, or set KINET_PERF)" >&2; exit 2; }
mkdir -p "$OUT"

NS_A=kxp-srv-$$ NS_B=kxp-cli-$$ IF_A=kxpa$$ IF_B=kxpb$$
ADDR_A=10.213.0.1 ADDR_B=10.213.0.2
SERVER_PID=
cleanup() {
  [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

# Runs one server (prefix $1, a command prefix or "") and one client (prefix $2) to server address $3.
pair() {
  local srv_pre=$1 cli_pre=$2 addr=$3 json=$4
  $srv_pre "$PERF" --server --port "$PORT" &
  SERVER_PID=$!
  local rc=0
  $cli_pre "$PERF" --client "$addr:$PORT" "${ARGS[@]}" --json "$json" || rc=$?
  wait "$SERVER_PID" || rc=$((rc ? rc : $?))
  SERVER_PID=
  return $rc
}

status=0
echo "== two network namespaces ($NS_A $ADDR_A <-> $NS_B $ADDR_B, veth) =="
if [ "$(id -u)" -eq 0 ] && ip netns add "$NS_A" 2>/dev/null; then
  ip netns add "$NS_B"
  ip link add "$IF_A" type veth peer name "$IF_B"
  ip link set "$IF_A" netns "$NS_A"
  ip link set "$IF_B" netns "$NS_B"
  ip -n "$NS_A" addr add "$ADDR_A/24" dev "$IF_A"
  ip -n "$NS_B" addr add "$ADDR_B/24" dev "$IF_B"
  for ns in "$NS_A" "$NS_B"; do ip -n "$ns" link set lo up; done
  ip -n "$NS_A" link set "$IF_A" up
  ip -n "$NS_B" link set "$IF_B" up
  pair "ip netns exec $NS_A env KINET_SOCKET_IFNAME==$IF_A" "ip netns exec $NS_B env KINET_SOCKET_IFNAME==$IF_B" \
    "$ADDR_A" "$OUT/xproc-netns.json" || status=1
else
  echo "run.sh: skipped (needs root and ip netns)"
fi

echo "== loopback (two processes, 127.0.0.1) =="
pair "env KINET_SOCKET_IFNAME==lo" "env KINET_SOCKET_IFNAME==lo" 127.0.0.1 "$OUT/xproc-loopback.json" || status=1
exit $status
