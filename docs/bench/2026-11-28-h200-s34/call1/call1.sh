#!/usr/bin/env bash
# Session 34 call 1 (H200). Binary: main 8abeb97 + `MegaOptions::weights_after_wait` and
# `attn_scale_head_residual` loading the position before its weights (.gpu/bin/tessera, `head`);
# `main` is 8abeb97's own binary (the reorder's A/B); the other arms are env wrappers of head.
# 0.6B, positions 1 and 512, 4 reps an arm (two device_ab runs, ABAB):
#   waw: attn_scale_head_residual waits in its body, the position before the wait, its weights
#        after (TESSERA_WAIT_IN_BODY=<rule>,attn_scale_head_residual
#        TESSERA_WEIGHTS_AFTER_WAIT=attn_scale_head_residual)
#   wib: the same with its weights before the wait too (session 29's +1% on the H100)
#   wq8: QKV's wait prefetch 8 MiB (its whole layer) instead of 4
#   wa2: o_proj's wait prefetch 2 MiB instead of 4
#   gho: gemv_head_residual (the plain step's o_proj, position 512) waiting outside its body
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 540 bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head main waw wib wq8 wa2 gho
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
