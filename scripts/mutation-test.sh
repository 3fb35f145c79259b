#!/usr/bin/env bash
# Mutation testing of the software NIC and its control path (src/providers/emu,
# and the core's QpInfo and environment checks).
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
#   KINET_EMU_RELAXED  the NIC's mode in the test runs (default 1, as ctest runs the suite)
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
  'src/providers/emu/engine.cpp ## s@w\.opcode != prm::kRdmaWrite, lmr)@w.opcode == prm::kRdmaRead, lmr)@ ## atomic result buffer needs no local write'
  'src/providers/emu/engine.cpp ## s@writes_local && !(m\.access & kLocalWrite)@writes_local \&\& !(m.access \& (kLocalWrite | kRemoteRead))@ ## local write not needed where remote read is granted'
  'src/providers/emu/engine.cpp ## s@if (w\.total_len() > nic_\.attr\.max_msg)@if (w.total_len() > nic_.attr.max_msg + 1ull)@ ## max_msg + 1 accepted'
  'src/providers/emu/engine.cpp ## s@auto it = mrs\.find(key);@auto it = mrs.find((key \& ~0xffu) | key_tag);@ ## key tag ignored (any tag of a live index matches)'
  'src/providers/emu/engine.cpp ## s@w\.is_atomic() \&\& w\.sge\[0\]\.len != 8@w.is_atomic() \&\& w.sge[0].len > 8@ ## atomic result buffer shorter than 8 B accepted'
  # CQE fields (engine.cpp)
  'src/providers/emu/engine.cpp ## s@be32(c + prm::kCqeSopQpn, (uint32_t(wqe_opcode) << 24) | qp_\.qpn)@be32(c + prm::kCqeSopQpn, qp_.qpn)@ ## CQE lacks the WQE opcode'
  'src/providers/emu/engine.cpp ## s@be32(c + prm::kCqeSopQpn, (uint32_t(wqe_opcode) << 24) | qp_\.qpn)@be32(c + prm::kCqeSopQpn, (uint32_t(wqe_opcode) << 24) | (qp_.qpn ^ 1))@ ## CQE names another QPN'
  'src/providers/emu/engine.cpp ## s@e\.w\.opcode, static_cast<uint32_t>(e\.w\.total_len()))@e.w.opcode, static_cast<uint32_t>(e.w.total_len() ? e.w.total_len() : 1))@ ## byte count of a 0-byte op is 1'
  'src/providers/emu/engine.cpp ## s@c\[prm::kCqeWqeCounter + 1\] = uint8_t(wqe_idx);@c[prm::kCqeWqeCounter + 1] = uint8_t(wqe_idx + 1);@ ## CQE names the next WQE'
  # responder side (fabric.cpp)
  'src/providers/emu/fabric.cpp ## s@return {kSynRemoteAccess, \"remote range \[@return {kSynRemoteInvalReq, \"remote range [@ ## remote bounds error with the wrong syndrome'
  'src/providers/emu/fabric.cpp ## s@if (op\.raddr < mr\.addr ||@if (op.raddr + 1 < mr.addr ||@ ## remote range may start 1 byte before its MR'
  'src/providers/emu/fabric.cpp ## s@op\.raddr + op\.len > mr\.addr + mr\.len@op.raddr + op.len > mr.addr + mr.len + 1@ ## remote range may end 1 byte past its MR'
  'src/providers/emu/fabric.cpp ## s@if (mr\.pd != peer->pd)@if (false \&\& mr.pd != peer->pd)@ ## rkey of another PD accepted'
  'src/providers/emu/fabric.cpp ## s@RemoteOp::Read ? kRemoteRead :@RemoteOp::Read ? kRemoteWrite :@ ## read checked against remote-write'
  'src/providers/emu/fabric.cpp ## s@ : kRemoteAtomic;@ : kRemoteWrite;@ ## atomic checked against remote-write'
  'src/providers/emu/fabric.cpp ## s@op\.kind == RemoteOp::Write ? kRemoteWrite :@op.kind == RemoteOp::Write ? kRemoteRead :@ ## write checked against remote-read'
  'src/providers/emu/fabric.cpp ## s@if (!(peer->remote_access & need))@if (!(peer->remote_access \& need) \&\& need != kRemoteWrite)@ ## QP remote_access write not checked'
  'src/providers/emu/fabric.cpp ## s@if (atomic && (op\.raddr & 7))@if (atomic \&\& (op.raddr \& 3))@ ## atomic misaligned by 4 accepted'
  'src/providers/emu/fabric.cpp ## s@if (atomic && (op\.raddr & 7))@if (atomic \&\& (op.raddr \& 6))@ ## atomic misaligned by 1 accepted'
  # control path (emu_device.cpp, core)
  'src/providers/emu/emu_device.cpp ## s@if ((access & (kRemoteWrite | kRemoteAtomic)) && !(access & kLocalWrite))@if ((access \& kRemoteWrite) \&\& !(access \& kLocalWrite))@ ## remote atomic without local write accepted'
  'src/providers/emu/engine.cpp ## s@if (st != QpState::Rts)$@if (st != QpState::Rts \&\& st != QpState::Rtr)@ ## doorbell accepted in RTR'
  'src/providers/emu/emu_device.cpp ## s@cfg\.signal_period > cfg\.sq_depth / 2@cfg.signal_period > cfg.sq_depth@ ## signal_period up to sq_depth accepted'
  'src/providers/emu/emu_device.cpp ## s@if (r\.port != 1)@if (r.port > 2)@ ## remote port 2 accepted'
  'src/providers/emu/emu_device.cpp ## s@move(QpState::Rtr, QpState::Rts, "to_rts");@move(state(), QpState::Rts, "to_rts");@ ## to_rts from any state (ERROR included)'
  'src/core/qp_info.cpp ## s@qpn >= (1u << 24)@qpn > (1u << 24)@ ## QPN 2^24 accepted'
  'src/core/qp_info.cpp ## s@if (port == 0)@if (false)@ ## port 0 accepted'
  'src/core/env.cpp ## s@ || std::strchr(v, .-.)@@ ## KINET_TIMEOUT_MS=-1 read as 2^64-1'
  'src/core/env.cpp ## s@if (v != 0) return v;@return v;@ ## KINET_TIMEOUT_MS=0 makes every wait expire at once'
  # overflow, flush, signalling, connection
  'src/providers/emu/engine.cpp ## s@if (state() == QpState::Error) {@if (false) {@ ## WQEs of an ERROR QP are executed (QP-op error) instead of flushed'
  'src/providers/emu/engine.cpp ## s@else ok = !e\.w\.signaled || write_cqe@else ok = write_cqe@ ## a CQE for every WQE, signalled or not'
  'src/providers/emu/engine.cpp ## s@ || s\.addr + s\.len < s\.addr)@)@ ## local range may wrap the address space'
  'src/providers/emu/fabric.cpp ## s@ || op\.raddr + op\.len < op\.raddr)@)@ ## remote range may wrap the address space'
  'src/providers/emu/fabric.cpp ## s@peer->remote_node != from_node || peer->remote_qpn != from_qpn@peer->remote_node != from_node@ ## responder answers a QP it is not connected to'
  # doorbells (engine.cpp): only announced WQEs run, at the index the doorbell carries
  'src/providers/emu/engine.cpp ## s@else if (ahead > rec_ahead)@else if (ahead > rec_ahead + 1)@ ## doorbell one WQE ahead of its record accepted'
  'src/providers/emu/engine.cpp ## s@else if (ahead > depth())@else if (ahead > depth() + 1)@ ## doorbell announcing one more than the ring accepted'
  'src/providers/emu/engine.cpp ## s@else if ((qpn_ds >> 8) != qp_\.qpn)@else if (false)@ ## doorbell naming another QP accepted'
  'src/providers/emu/engine.cpp ## s@if ((head \& 0xff0000ffu) || (qpn_ds \& 0xffu))@if (head \& 0xff000000u)@ ## doorbell with opcode / DS bytes set accepted'
  'src/providers/emu/engine.cpp ## s@qp_\.sq_announced = base + ahead;@qp_.sq_announced = base + rec_ahead;@ ## WQEs run off the doorbell record (published, not announced)'
  'src/providers/emu/engine.cpp ## s@if (w\.wqe_index != static_cast<uint16_t>(e\.idx))@if (false)@ ## WQE index field not checked against its slot'
  'src/providers/emu/engine.cpp ## s@if (w\.qpn != qp_\.qpn)@if (false)@ ## WQE naming another QP executed'
  # relaxed mode (engine.cpp): fences order behind outstanding READs/ATOMICs
  'src/providers/emu/engine.cpp ## s@(e\.w\.fence || big_write)@(big_write)@ ## fence bit ignored'
  'src/providers/emu/engine.cpp ## s@if (e\.w\.opcode != prm::kRdmaWrite || e\.w\.is_inline || !window_has_read_or_atomic()) return {};@return {};@ ## WRITE source read at completion, not at issue'
  # decoder (decode.cpp): every field validated
  'src/providers/emu/decode.cpp ## s@if (opmod != 0)@if (opmod > 1)@ ## opmod 1 accepted'
  'src/providers/emu/decode.cpp ## s@if (bb\[kCtrlSignature\] != 0)@if (false)@ ## signature byte not checked'
  'src/providers/emu/decode.cpp ## s@if (bb\[kCtrlDci\] != 0 || bb\[kCtrlDci + 1\] != 0)@if (bb[kCtrlDci] != 0)@ ## dci low byte not checked'
  'src/providers/emu/decode.cpp ## s@if (rd_be32(bb + kCtrlImm) != 0)@if (false)@ ## immediate field not checked'
  'src/providers/emu/decode.cpp ## s@if (d->fm_ce_se \& ~kFmCeSeKnown)@if (false)@ ## unknown fm_ce_se bits accepted'
  'src/providers/emu/decode.cpp ## s@if (r != 0) {@if (r > 1) {@ ## raddr reserved word 1 accepted'
  'src/providers/emu/decode.cpp ## s@if (d->ds == 0 || d->ds > kMaxDsOneBB)@if (d->ds == 0 || d->ds > kMaxDsOneBB + 1)@ ## DS 5 accepted in a 64-byte block'
  'src/providers/emu/decode.cpp ## s@if (d->ds != 1) return@if (d->ds > 2) return@ ## NOP with DS 2 accepted'
  'src/providers/emu/decode.cpp ## s@if (d->ds != 4)@if (d->ds < 3)@ ## atomic with DS 3 accepted'
  'src/providers/emu/decode.cpp ## s@if (d->ds != want_ds)@if (d->ds < want_ds)@ ## inline WQE with a DS too large accepted'
  'src/providers/emu/decode.cpp ## s@if (len > room)@if (len > room + 16)@ ## inline length may overrun the WQE'
  'src/providers/emu/decode.cpp ## s@if (bb\[i\] != 0)@if (false)@ ## inline padding not checked'
  'src/providers/emu/decode.cpp ## s@if (read) return@if (false) return@ ## RDMA_READ with the inline flag accepted'
  'src/providers/emu/decode.cpp ## s@d->opcode == kAtomicFa \&\& d->compare != 0@false@ ## ATOMIC_FA compare field not checked'
  # registration (emu_device.cpp): mapping checks and key generations
  'src/providers/emu/emu_device.cpp ## s@done = hi - 1 >= last;@done = hi >= last;@ ## range 1 byte past its mapping accepted'
  'src/providers/emu/emu_device.cpp ## s@if (lo > pos) break;@if (lo > pos + 4096) break;@ ## a one-page hole inside the range accepted'
  'src/providers/emu/emu_device.cpp ## s@perms\[0\] != .r. ?@false ?@ ## unreadable (PROT_NONE) mapping accepted'
  'src/providers/emu/emu_device.cpp ## s@write \&\& perms\[1\] != .w. ?@false ?@ ## read-only mapping accepted with local write'
  'src/providers/emu/emu_device.cpp ## s@if (len - 1 > std::numeric_limits<uint64_t>::max() - a)@if (len - 1 > std::numeric_limits<uint64_t>::max() - a + 1)@ ## range wrapping by one byte accepted'
  'src/providers/emu/emu_device.cpp ## s@++gen\[index\];@@ ## a freed key or QPN names the next object at its index (no generation)'
  'src/providers/emu/emu_device.cpp ## s@nic->mr_ids\.first_gen = nic->key_tag;@nic->mr_ids.first_gen = 1;@ ## keys of different NICs coincide'
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
(cd "$ROOT" && { git ls-files -co --exclude-standard -z 2>/dev/null ||
  find . \( -name .git -o -name "build*" \) -prune -o -type f -print0; } | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | (cd "$SCRATCH/src" && tar -xf -) ||
  die "copying the tree failed"
B=$SCRATCH/build
LAUNCHER=""
command -v ccache >/dev/null && LAUNCHER="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"
# A shared libkinet: a mutant relinks one library, not every test binary.
cmake -S "$SCRATCH/src" -B "$B" -G Ninja -DKINET_CUDA=OFF $LAUNCHER -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_POSITION_INDEPENDENT_CODE=ON -DCMAKE_LINK_DEPENDS_NO_SHARED=ON >"$SCRATCH/cmake.log" 2>&1 ||
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
    out=$(KINET_EMU_RELAXED=${KINET_EMU_RELAXED:-1} KINET_TEST_SCALE=${KINET_TEST_SCALE:-50} timeout -k 5 "$TMO" "$B/tests/$t" --gtest_brief=1 \
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
  fails=$(KINET_EMU_RELAXED=${KINET_EMU_RELAXED:-1} KINET_TEST_SCALE=${KINET_TEST_SCALE:-50} timeout -k 5 "$TMO" "$B/tests/$t" --gtest_brief=1 2>&1 |
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
