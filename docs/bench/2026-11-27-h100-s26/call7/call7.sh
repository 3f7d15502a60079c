#!/usr/bin/env bash
# Session 26 call 7 (11c3bda + the lm_head's pairs per program, off by default; tune's
# retune now keeps it, which call 1's arm did not): lmpp (TESSERA_LM_PER_PROGRAM=1: one
# (max, argmax) pair per lm_head program, 132 for the merge instead of 4748 blocks, the
# merge loading the indices beside the maxima) against head. 0.6B at 1 and 512, 8 reps;
# 1.7B at 1, 2 reps. With lmpp: the GPU tests (real shape at 0.6B), memcheck and racecheck
# on two steps at position 0.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 8 "1 512" head lmpp
d=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
timeout 100 .gpu/bin/tessera-lmpp tune --model $d --tokens 64 --position 1 --profile > $ROOT/prof/profile-lmpp-p1.md 2> $ROOT/prof/profile-lmpp-p1.err
echo "profile lmpp p1 rc=$?"; grep -E "^\| stage [56]" $ROOT/prof/profile-lmpp-p1.md | cut -d'|' -f2-5,10-15
echo "=== [$(date +%T)] GPU tests with lmpp (real shape at 0.6B)"
timeout 200 env TESSERA_HF_CKPT=$d TESSERA_LM_PER_PROGRAM=1 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests-lmpp.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests-lmpp.log | tail -12
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  echo "=== [$(date +%T)] $tool at position 0 (lmpp)"
  timeout 120 env TESSERA_LM_PER_PROGRAM=1 "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d --tokens 2 --position 0 --watchdog-ms 120000 > $ROOT/sanitize-$tool-p0.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $ROOT/sanitize-$tool-p0.log | head -2
done
left=$(( 585 - ($(date +%s) - T0) ))
if (( left > 150 )); then
  echo "=== [$(date +%T)] 1.7b A/B"
  timeout $left bash scripts/device_ab_reps.sh 1.7b 2 "1" head lmpp
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
