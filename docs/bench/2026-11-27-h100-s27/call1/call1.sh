#!/usr/bin/env bash
# Session 27 call 1. Binaries: .gpu/bin/tessera = 8aedbd6 + candidates (the attention's
# 1/l once instead of D divisions, unconditional; TESSERA_ROW_VALUES=1: per-row values
# computed once per row, not per element; TESSERA_ATTN_CACHED=1: attn_head_residual reads
# the new K/V row from the cache, no select), .gpu/bin/tessera-old = 8aedbd6 (main).
# Arms: base (8aedbd6), head (recip), rv, c, rvc. 0.6B at 1 and 512, 6 reps; profiles;
# 1.7B 2 reps; GPU tests with rv+c on (real shape at 0.6B).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" base head rv c rvc
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in base rvc; do
  timeout 100 .gpu/bin/tessera-$n tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-$n-p1.md 2> $ROOT/prof/profile-$n-p1.err
  echo "profile $n p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p1.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] GPU tests, rv + c on (real shape at 0.6B)"
timeout 200 env TESSERA_ROW_VALUES=1 TESSERA_ATTN_CACHED=1 TESSERA_HF_CKPT=$d06 .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
left=$(( 570 - ($(date +%s) - T0) ))
if (( left > 150 )); then
  echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
  timeout $left bash scripts/device_ab_reps.sh 1.7b 2 "1 512" base head rv rvc
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
