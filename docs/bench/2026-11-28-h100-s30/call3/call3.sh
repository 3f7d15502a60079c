#!/usr/bin/env bash
# Session 30 call 3. Binary: .gpu/bin/tessera = cecba36 (main's default: the step that loads
# the attention's tiles ahead, from position 1024 at 0.6B, keeps the finished heads).
# Arms: pa = TESSERA_QKV_PAIRS_AHEAD=1 (the QKV pairs in that step too:
# attn_split_ahead_scaled, waiting outside its body; ptxas 96 / 256 bytes of spill, 14 / 11
# in the QKV body), paw = pa waiting in its body (100 / 228), spw = attn_split_scaled (the
# plain step's split attention, 128-1023 positions) waiting in its body (72 / 184; head's
# 52 / 184). 0.6B: positions 2048 (head pa paw) and 512 (head spw), 6 reps; then the step
# with no waits (`--no-waits --launch-only`) at positions 1 and 512, twice.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p2048"
R=$ROOT
ROOT=$R/p2048 && mkdir -p $ROOT && timeout 300 bash scripts/device_ab_reps.sh 0.6b 6 "2048" head pa paw
echo "=== [$(date +%T)] 0.6b A/B p512"
ROOT=$R/p512 && mkdir -p $ROOT && timeout 150 bash scripts/device_ab_reps.sh 0.6b 6 "512" head spw
ROOT=$R
d=$(ckpt_dir 0.6b)
for p in 1 512; do for i in 1 2; do
  echo "=== [$(date +%T)] no waits, launch only, position $p ($i)"
  timeout 60 .gpu/bin/tessera tune --model $d --tokens 128 --position $p --no-waits --launch-only > $ROOT/nowait-p$p-$i.log 2>&1; echo rc=$?
  grep -E "^\| [0-9]|launch" $ROOT/nowait-p$p-$i.log | head -4
done; done
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
