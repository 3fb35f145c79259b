#!/usr/bin/env bash
# A/B of cross-process kinet-perf on loopback: one test, several environments,
# R rounds, the environments alternating within each round (so drift hits
# both); prints every run's kinet/tcp figures and the median ratio per
# environment. On a small VM single runs vary 2-5x: compare medians.
# Usage: bench/xproc/ab.sh "KINET_EMU_ACK_DELAY_US=0" "KINET_EMU_ACK_DELAY_US=200"
# Environment: KINET_PERF (default build/tools/kinet-perf), R (rounds, 6),
# T (test arguments, default "write_lat -s 64 -n 3000"), PORT (18600).
set -u
P=${KINET_PERF:-build/tools/kinet-perf}
R=${R:-6}; T=${T:-write_lat -s 64 -n 3000}; PORT=${PORT:-18600}
declare -A res
for _ in $(seq "$R"); do
  for cfg in "$@"; do
    # $cfg and $T split into words on purpose.
    env $cfg KINET_SOCKET_IFNAME==lo "$P" --server --port "$PORT" >/dev/null 2>&1 & sleep 0.2
    line=$(env $cfg KINET_SOCKET_IFNAME==lo "$P" --client "127.0.0.1:$PORT" --test $T | grep -E "^ [0-9]+ +[0-9]+ +\|" | head -1)
    wait
    res[$cfg]="${res[$cfg]:-} $(echo $line | awk '{print $4"/"$8"="$(NF-2)}')"
  done
done
for cfg in "$@"; do echo "$cfg: ${res[$cfg]}"; echo "${res[$cfg]}" | tr ' ' '\n' | grep = | awk -F= '{print $2}' | sort -g | awk '{a[NR]=$1} END {print "   median ratio", a[int((NR+1)/2)]}'; done
