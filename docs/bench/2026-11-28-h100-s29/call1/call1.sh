#!/usr/bin/env bash
# Session 29 call 1. Binary: .gpu/bin/tessera = e5c4397 (main + QKV pairs, off). Arms: head
# (default), pairs (TESSERA_QKV_PAIRS=1: QKV programs rope their own half-head pairs, no
# ticket, o_proj's programs apply 1/rms). 0.6B at position 1 (the attention-inside-o_proj
# specialisation runs below 128), 6 reps; profiles of both; the GPU tests with pairs on
# (real shape at 0.6B); 1.7B 4 reps.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
timeout 200 bash scripts/device_ab_reps.sh 0.6b 6 "1" head pairs
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in head pairs; do
  b=.gpu/bin/tessera; [[ $n == head ]] || b=.gpu/bin/tessera-$n
  timeout 60 $b tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-$n-p1.md 2> $ROOT/prof/profile-$n-p1.err
  echo "profile $n p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p1.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] GPU tests with pairs (real shape at 0.6B)"
timeout 200 env TESSERA_QKV_PAIRS=1 TESSERA_HF_CKPT=$d06 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1" head pairs
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
