#!/usr/bin/env bash
# Session 28 call 1. Binaries: .gpu/bin/tessera = bcfb108 (argmax_merge's max reduced once,
# its position loaded first; skip_seen_waits built, off), .gpu/bin/tessera-base = adcc1f9
# (main before). Arms: base, head, skip (TESSERA_SKIP_SEEN=1: a CTA leaves out a wait whose
# target it already waited for), col (TESSERA_COL_VALUES=1), arcol (ATTN_ROPE=1 + COL_VALUES=1
# at 0.6B). 0.6B at 1 and 512, 6 reps; a profile of skip; 1.7B 4 reps; 4B if time is left.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" base head skip col arcol
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in head skip; do
  timeout 60 .gpu/bin/tessera-$n tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-$n-p1.md 2> $ROOT/prof/profile-$n-p1.err
  echo "profile $n p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p1.md | cut -d'|' -f2-5,10-15
done
left=$(( 560 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1 512" base head skip col
left=$(( 570 - ($(date +%s) - T0) ))
if (( left > 110 )); then
  echo "=== [$(date +%T)] 4b A/B (limit ${left}s)"
  timeout $left bash scripts/device_ab_reps.sh 4b 2 "1" head skip col
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
