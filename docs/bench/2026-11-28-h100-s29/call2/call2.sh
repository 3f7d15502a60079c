#!/usr/bin/env bash
# Session 29 call 2. Binary: .gpu/bin/tessera = QKV pairs (off) whose kernels wait in their
# bodies where those they replace do (attn_scale_head_residual at 0.6B and 1.7B as
# attn_head_residual, rmsnorm_qkv_rope_pairs at 1.7B as rmsnorm_qkv_rope). Arms: head,
# pairs (TESSERA_QKV_PAIRS=1). 0.6B at position 1, 6 reps; a profile of pairs; 1.7B 4 reps.
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
for n in pairs; do
  timeout 60 .gpu/bin/tessera-$n tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-$n-p1.md 2> $ROOT/prof/profile-$n-p1.err
  echo "profile $n p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p1.md | cut -d'|' -f2-5,10-15
done
left=$(( 500 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1" head pairs
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
