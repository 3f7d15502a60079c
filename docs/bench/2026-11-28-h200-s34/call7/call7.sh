#!/usr/bin/env bash
# Session 34 call 7 (H200). Binary: call 6's (its default generated C is main 912f202's).
# Call 1's wa2 was 0.9% faster at 0.6B's position 512 (inside head's spread): o_proj per
# head's wait prefetch (`gemv_head_residual`, the plain step's o_proj) again, 6 reps:
#   wa2: TESSERA_WAIT_PREFETCH=rmsnorm_mlp_tiles=2,gemv_head_residual=2 (4 MiB by default)
#   wo1: the same at 1 MiB
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b decode A/B p512 p2048, 6 reps"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 6 "512 2048" head wa2 wo1
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
