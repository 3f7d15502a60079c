#!/usr/bin/env bash
# Session 33 call 9 (H200). Binary: main 3cd8561's (.gpu/bin/tessera); the arms are env wrappers
# of it. 0.6B, positions 1 and 512, 4 reps an arm (two device_ab runs, ABAB): the stages'
# waits inside their bodies (the H100 chose none at 0.6B below position 128; the probe's
# `ahead` gained 3% on the H200) and four residual copies (level on the H100, session 26).
#   wibq: TESSERA_WAIT_IN_BODY=rmsnorm_qkv_rope_pairs,attn_split,attn_split_ahead
#   wibm: TESSERA_WAIT_IN_BODY=rmsnorm_mlp_tiles,attn_split,attn_split_ahead
#   wiba: TESSERA_WAIT_IN_BODY=1 (every stage)
#   rc4:  TESSERA_RESID_COPIES=4
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1 p512"
timeout 480 bash scripts/device_ab_reps.sh 0.6b 4 "1 512" head wibq wibm wiba rc4
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
