#!/usr/bin/env bash
# Session 31 call 5. Binary ab7c4db as in call 4. Why `fl` lost: 0.6B position 1, 6 reps,
# head / fl (TESSERA_FIRST_LOADS=1) / nw (the stages' window prefetch while waiting off:
# TESSERA_WAIT_PREFETCH=...=0) / flnw (both).
# (Wrappers: tessera-nw = env TESSERA_WAIT_PREFETCH=rmsnorm_mlp_tiles=0,rmsnorm_qkv_rope_pairs=0,
# attn_scale_head_residual=0,lm_head_argmax_tiles=0 tessera; tessera-flnw the same with
# TESSERA_FIRST_LOADS=1.) Rewritten from the session's record: scripts/pack_gpu.sh had
# removed the original from .gpu/.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1"
timeout 400 bash scripts/device_ab_reps.sh 0.6b 6 "1" head fl nw flnw
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
