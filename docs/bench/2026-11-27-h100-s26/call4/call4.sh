#!/usr/bin/env bash
# Session 26 call 4 (call 3's binary): the MLP stage's wait prefetch, which call 3 found
# 3.1% / 2.0% faster at 2 MiB than at the default 4 (0.6B, positions 1 / 512): wmN =
# `TESSERA_WAIT_PREFETCH=rmsnorm_mlp_tiles=N` (MiB; the other stages 4), wm2q2 = the MLP's
# and QKV's 2. 0.6B at 1 and 512, 6 reps; 1.7B at 1 and 512, 2 reps; 4B at 1, 2 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
bash scripts/device_ab_reps.sh 0.6b 6 "1 512" head wm0 wm1 wm2 wm3 wm2q2
d06=$(ckpt_dir 0.6b)
mkdir -p $ROOT/prof
for n in wm1 wm2; do
  timeout 100 .gpu/bin/tessera-$n tune --model $d06 --tokens 64 --position 1 --profile > $ROOT/prof/profile-$n-p1.md 2> $ROOT/prof/profile-$n-p1.err
  echo "profile $n p1 rc=$?"; grep -E "^\| stage" $ROOT/prof/profile-$n-p1.md | cut -d'|' -f2-5,10-15
done
echo "=== [$(date +%T)] 1.7b A/B"
bash scripts/device_ab_reps.sh 1.7b 2 "1 512" head wm1 wm2 wm2q2
echo "=== [$(date +%T)] 4b A/B"
bash scripts/device_ab_reps.sh 4b 2 "1" head wm1 wm2
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
