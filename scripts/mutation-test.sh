#!/usr/bin/env bash
# Mutation testing of the software NIC and its control path.
#
# Plants one single-line bug at a time (a sed expression against one source
# file) in a scratch copy of this tree, rebuilds only the emu test binaries
# (CPU only, ccache), runs them, and prints per mutant:
#   killed      some emu test failed (or timed out): the suite caught the bug
#   survived    every emu test passed: no test looks at that line's edge
#   not-applied the expression matched nothing (the code changed): fix the list
#   no-build    the mutant does not compile (not counted either way)
# and the kill rate = killed / (killed + survived).
#
# Usage: scripts/mutation-test.sh [--list] [--only N[,N...]]
# Environment:
#   KINET_MUT_DIR      scratch directory (default /tmp/kinet-mutation-$USER)
#   KINET_MUT_EXCLUDE  extended regex: emu test binaries to leave out, e.g.
#                      "edge" to measure the suite without the edge tests
#   KINET_MUT_TIMEOUT  seconds per test binary (default 120)
#   KINET_MUT_JOBS     ninja -j (default 2)
set -u -o pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCRATCH=${KINET_MUT_DIR:-/tmp/kinet-mutation-${USER:-$(id -u)}}
EXCLUDE=${KINET_MUT_EXCLUDE:-}
TMO=${KINET_MUT_TIMEOUT:-120}
JOBS=${KINET_MUT_JOBS:-2}

# ---- the mutants: FILE (relative to the root) ## sed expression ## what it breaks
# Each expression matches the condition's text, not a line number, so edits
# elsewhere in the file do not move it; one that no longer matches is
# reported as not-applied, never counted as killed.
MUTANTS=(
  # requester side: the local checks (engine.cpp)
  'src/providers/emu/engine.cpp ## s@if (s\.addr < m\.addr ||@if (s.addr + 1 < m.addr ||@ ## local range may start 1 byte before its MR'
  'src/providers/emu/engine.cpp ## s@s\.addr + s\.len > m\.addr + m\.len@s.addr + s.len > m.addr + m.len + 1@ ## local range may end 1 byte past its MR'
  'src/providers/emu/engine.cpp ## s@if (m\.pd != qp_\.pd)@if (false \&\& m.pd != qp_.pd)@ ## lkey of another PD accepted'
  'src/providers/emu/engine.cpp ## s@w\.opcode != mlx5::kOpRdmaWrite, lmr)@w.opcode == mlx5::kOpRdmaRead, lmr)@ ## atomic result buffer needs no local write'
  'src/providers/emu/engine.cpp ## s@writes_local && !(m\.access & kLocalWrite)@writes_local \&\& !(m.access \& (kLocalWrite | kRemoteRead))@ ## local write not needed where remote read is granted'
  'src/providers/emu/engine.cpp ## s@if (len > nic_\.attr\.max_msg)@if (len > nic_.attr.max_msg + 1ull)@ ## max_msg + 1 accepted'
  'src/providers/emu/engine.cpp ## s@auto it = mrs\.find(key);@auto it = mrs.find((key \& ~0xffu) | key_tag);@ ## key tag ignored (any tag of a live index matches)'
  # CQE fields (engine.cpp)
  'src/providers/emu/engine.cpp ## s@bswap32((uint32_t(wqe_opcode) << 24) | qp_\.qpn)@bswap32(qp_.qpn)@ ## CQE lacks the WQE opcode'
  'src/providers/emu/engine.cpp ## s@bswap32((uint32_t(wqe_opcode) << 24) | qp_\.qpn)@bswap32((uint32_t(wqe_opcode) << 24) | (qp_.qpn ^ 1))@ ## CQE names another QPN'
  'src/providers/emu/engine.cpp ## s@w\.opcode, static_cast<uint32_t>(w\.total_len()))@w.opcode, static_cast<uint32_t>(w.total_len() ? w.total_len() : 1))@ ## byte count of a 0-byte op is 1'
  # responder side (fabric.cpp)
  'src/providers/emu/fabric.cpp ## s@return {mlx5::kSynRemoteAccess, "remote range \[@return {mlx5::kSynRemoteInvalReq, "remote range [@ ## remote bounds error with the wrong syndrome'
  'src/providers/emu/fabric.cpp ## s@if (op\.raddr < mr\.addr ||@if (op.raddr + 1 < mr.addr ||@ ## remote range may start 1 byte before its MR'
  'src/providers/emu/fabric.cpp ## s@op\.raddr + op\.len > mr\.addr + mr\.len@op.raddr + op.len > mr.addr + mr.len + 1@ ## remote range may end 1 byte past its MR'
  'src/providers/emu/fabric.cpp ## s@if (mr\.pd != peer->pd)@if (false \&\& mr.pd != peer->pd)@ ## rkey of another PD accepted'
  'src/providers/emu/fabric.cpp ## s@RemoteOp::Read ? kRemoteRead :@RemoteOp::Read ? kRemoteWrite :@ ## read checked against remote-write'
  'src/providers/emu/fabric.cpp ## s@ : kRemoteAtomic;@ : kRemoteWrite;@ ## atomic checked against remote-write'
  'src/providers/emu/fabric.cpp ## s@op\.kind == RemoteOp::Write ? kRemoteWrite :@op.kind == RemoteOp::Write ? kRemoteRead :@ ## write checked against remote-read'
  'src/providers/emu/fabric.cpp ## s@if (!(peer->remote_access & need))@if (!(peer->remote_access \& need) \&\& need != kRemoteWrite)@ ## QP remote_access write not checked'
  'src/providers/emu/fabric.cpp ## s@if (atomic && (op\.raddr & 7))@if (atomic \&\& (op.raddr \& 3))@ ## atomic misaligned by 4 accepted'
  'src/providers/emu/fabric.cpp ## s@if (atomic && (op\.raddr & 7))@if (atomic \&\& (op.raddr \& 6))@ ## atomic misaligned by 1 accepted'
  # control path (emu_device.cpp)
  'src/providers/emu/emu_device.cpp ## s@if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite))@if ((access \& kRemoteWrite) \&\& !(access \& kLocalWrite))@ ## remote atomic without local write accepted'
  'src/providers/emu/engine.cpp ## s@if (st != QpState::Rts) {@if (st != QpState::Rts \&\& st != QpState::Rtr) {@ ## doorbell accepted in RTR'
  'src/providers/emu/emu_device.cpp ## s@cfg\.signal_period > cfg\.sq_depth / 2@cfg.signal_period > cfg.sq_depth@ ## signal_period up to sq_depth accepted'
  # not aimed at by the edge tests: overflow, flush, signalling, connection, decoder
  'src/providers/emu/engine.cpp ## s@if (st == QpState::Error)  //@if (st == QpState::Error \&\& w.signaled)  //@ ## unsignalled WQEs of an ERROR QP run'
  'src/providers/emu/engine.cpp ## s@if (w\.signaled) return write_cqe(@if (true) return write_cqe(@ ## a CQE for every WQE, signalled or not'
  'src/providers/emu/engine.cpp ## s@ || s\.addr + s\.len < s\.addr)@)@ ## local range may wrap the address space'
  'src/providers/emu/fabric.cpp ## s@ || op\.raddr + op\.len < op\.raddr)@)@ ## remote range may wrap the address space'
  'src/providers/emu/fabric.cpp ## s@peer->remote_node != from_node || peer->remote_qpn != from_qpn@peer->remote_node != from_node@ ## responder answers a QP it is not connected to'
  'src/providers/emu/decode.cpp ## s@if (d->ds == 0 || d->ds > 4)@if (d->ds == 0 || d->ds > 5)@ ## DS 5 accepted in a 64-byte block'
  'src/providers/emu/decode.cpp ## s@if (d->inline_len > room)@if (d->inline_len > room + 16)@ ## inline length may overrun the WQE'
  'src/providers/emu/engine.cpp ## s@if (is_atomic \&\& w\.sge\[0\]\.len != 8)@if (is_atomic \&\& w.sge[0].len > 8)@ ## atomic result buffer shorter than 8 B accepted'
)
# Sets f, e, d from one MUTANTS entry.
split() { f=${1%% ## *}; local r=${1#* ## }; e=${r%% ## *}; d=${r#* ## }; }
die() { echo "mutation-test: $*" >&2; exit 2; }

if [[ ${1:-} == --list ]]; then
  i=0
  for m in "${MUTANTS[@]}"; do
    i=$((i + 1)); split "$m"; printf '%2d  %-34s %s\n' "$i" "$f" "$d"
  done
  exit 0
fi
ONLY=""
if [[ ${1:-} == --only ]]; then ONLY=",${2:?--only needs N[,N...]},"; fi

# ---- scratch copy: tracked and untracked-not-ignored files of this tree
echo "mutation-test: copying $ROOT -> $SCRATCH/src"
mkdir -p "$SCRATCH/src" || die "cannot create $SCRATCH"
(cd "$ROOT" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | (cd "$SCRATCH/src" && tar -xf -) ||
  die "copying the tree failed"
B=$SCRATCH/build
cmake -S "$SCRATCH/src" -B "$B" -G Ninja -DKINET_CUDA=OFF -DCMAKE_CXX_COMPILER_LAUNCHER=ccache >"$SCRATCH/cmake.log" 2>&1 ||
  die "cmake failed: see $SCRATCH/cmake.log"
TARGETS=$(ninja -C "$B" -t targets all | sed -n 's/^\(kinet_emu_[a-z_]*_test\): .*/\1/p' | sort -u)
[[ -n $EXCLUDE ]] && TARGETS=$(grep -Ev -- "$EXCLUDE" <<<"$TARGETS")
[[ -n $TARGETS ]] || die "no emu test targets"
echo "mutation-test: test binaries:" $TARGETS

build() { ninja -C "$B" -j"$JOBS" $TARGETS >"$SCRATCH/build.log" 2>&1; }
# Runs every binary; prints the first failure ("binary: test") and returns 1, or returns 0.
# Tests that fail on the unmutated tree (known bugs, marked "expected to pass
# after ...") are left out of the mutant runs: FILTER_<binary> holds them.
run_tests() {
  local t out
  for t in $TARGETS; do
    local fv="FILTER_$t"
    out=$(KINET_TEST_SCALE=${KINET_TEST_SCALE:-50} timeout -k 5 "$TMO" "$B/tests/$t" --gtest_brief=1 \
      ${!fv:+--gtest_filter=-${!fv}} 2>&1)
    local rc=$?
    if [[ $rc -ne 0 ]]; then
      local first
      first=$(grep -m1 -o '\[  FAILED  \] [A-Za-z0-9_/.]*' <<<"$out" | sed 's/\[  FAILED  \] //')
      [[ $rc -ge 124 ]] && first="${first:-timeout/crash rc=$rc}"
      echo "$t: ${first:-rc=$rc}"
      return 1
    fi
  done
  return 0
}

echo "mutation-test: baseline build"
build || die "the unmutated tree does not build: see $SCRATCH/build.log"
for t in $TARGETS; do
  fails=$(KINET_TEST_SCALE=${KINET_TEST_SCALE:-50} timeout -k 5 "$TMO" "$B/tests/$t" --gtest_brief=1 2>&1 |
    sed -n 's/^\[  FAILED  \] \([A-Za-z0-9_/.]*\).*/\1/p' | sort -u | paste -sd: -)
  if [[ -n $fails ]]; then
    echo "mutation-test: $t fails on the unmutated tree; left out of the mutant runs: $fails"
    printf -v "FILTER_$t" '%s' "$fails"
  fi
done
if ! why=$(run_tests); then die "the unmutated tree fails its tests ($why): fix that first"; fi

killed=0 survived=0 skipped=0 nobuild=0 i=0
declare -a SURVIVORS=()
for m in "${MUTANTS[@]}"; do
  i=$((i + 1))
  [[ -n $ONLY && $ONLY != *",$i,"* ]] && continue
  split "$m"
  src=$SCRATCH/src/$f
  [[ -f $src ]] || { printf '%2d not-applied  %s (no file %s)\n' "$i" "$d" "$f"; skipped=$((skipped + 1)); continue; }
  cp -p "$src" "$src.orig"
  sed -i -e "$e" "$src"
  if cmp -s "$src" "$src.orig"; then
    printf '%2d not-applied  %s: mutation did not apply (%s)\n' "$i" "$d" "$f"
    skipped=$((skipped + 1))
  elif ! build; then
    printf '%2d no-build     %s\n' "$i" "$d"
    nobuild=$((nobuild + 1))
  elif why=$(run_tests); then
    printf '%2d SURVIVED     %s\n' "$i" "$d"
    survived=$((survived + 1))
    SURVIVORS+=("$i")
  else
    printf '%2d killed       %s  [%s]\n' "$i" "$d" "$why"
    killed=$((killed + 1))
  fi
  mv "$src.orig" "$src"
  touch "$src"  # rebuild the original next time round
done
build >/dev/null 2>&1 || true

total=$((killed + survived))
rate=0
[[ $total -gt 0 ]] && rate=$((100 * killed / total))
echo "mutation-test: killed $killed / $total (${rate}%), survived $survived${SURVIVORS[*]:+ (${SURVIVORS[*]})}," \
  "not applied $skipped, did not build $nobuild"
[[ $survived -eq 0 && $skipped -eq 0 ]]
