#!/usr/bin/env bash
# Session 27 call 2. Binaries: .gpu/bin/tessera = da1e28a (per-row values on, the
# attention's 1/l once), .gpu/bin/tessera-old = 8aedbd6 (main before), .gpu/bin/tessera-nr
# = da1e28a with the divisions back (8aedbd6's attention.rs). Arms: base (8aedbd6), head,
# nr (no reciprocal), ar (TESSERA_ATTN_ROPE=1), io (TESSERA_ATTN_IN_O=1024: the attention
# inside o_proj up to 1024 positions). 0.6B at 1 and 512, 6 reps; 1.7B 4 reps with ar0
# (TESSERA_ATTN_ROPE=0); a profile of head at 0.6B.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" base head nr ar io
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in head; do
  for p in 1 512; do
    timeout 100 .gpu/bin/tessera tune --model $d06 --tokens 64 --position $p --profile > $ROOT/prof/profile-$n-p$p.md 2> $ROOT/prof/profile-$n-p$p.err
    echo "profile $n p$p rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p$p.md | cut -d'|' -f2-5,10-15
  done
done
left=$(( 570 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1 512" base head nr ar0
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
