#!/usr/bin/env bash
# Session 29 call 3. Binary: .gpu/bin/tessera = 006dd47 (QKV pairs, off; the rotation's
# inputs loaded after the first half's reduction: ptxas no spill / 4 bytes). Arms: head,
# pairs (TESSERA_QKV_PAIRS=1, the rule's waits: attn_scale_head_residual in its body, and
# at 1.7B rmsnorm_qkv_rope_pairs too), pn06 / pn17 (pairs with attn_scale_head_residual
# waiting outside its body). 0.6B at position 1, 6 reps; 1.7B 4 reps.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B"
timeout 240 bash scripts/device_ab_reps.sh 0.6b 6 "1" head pairs pn06
left=$(( 500 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] 1.7b A/B (limit ${left}s)"
timeout $left bash scripts/device_ab_reps.sh 1.7b 4 "1" head pairs pn17
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
