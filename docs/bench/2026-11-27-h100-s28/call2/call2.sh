#!/usr/bin/env bash
# Session 28 call 2. Binaries: .gpu/bin/tessera = 3563a71 (the decode step's outer loop over
# `steps`, one step a launch by default), .gpu/bin/tessera-base = bcfb108 (call 1's head:
# no loop). Arms: base, head, st2 / st4 (TESSERA_STEPS_PER_LAUNCH=2 / 4: a readback batch's
# steps in one launch). 0.6B at 1 and 512, 6 reps; head's launch-only timing; the GPU tests
# with 4 steps a launch (real shape at 0.6B); 1.7B 4 reps.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" base head st2 st4
d06=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] launch-only, head and base, p1"
for n in head base; do
  b=.gpu/bin/tessera; [[ $n == head ]] || b=.gpu/bin/tessera-$n
  timeout 60 $b tune --model $d06 --tokens 128 --position 1 --launch-only > $ROOT/launch-only-$n.md 2>&1
  echo "$n rc=$?"; grep -iE "launch|^\| [0-9]" $ROOT/launch-only-$n.md | head -4
done
echo "=== [$(date +%T)] GPU tests, 4 steps a launch (real shape at 0.6B)"
timeout 200 env TESSERA_STEPS_PER_LAUNCH=4 TESSERA_HF_CKPT=$d06 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1 512" base head st4
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
