#!/usr/bin/env bash
# Session 30 call 2. Binary: .gpu/bin/tessera = eb8bfac (main's default; PTX identical to
# fed130e's): the DSL's `prefetch` now asks once per 128-byte line (call 1's asked once per
# 16-byte chunk). Arms as call 1's (env wrappers): kv = TESSERA_KV_PREFETCH=128, mlp8 /
# mlp16 = TESSERA_MLP_PREFETCH=8 / 16, kvmlp / kvmlp16 = kv with mlp8 / mlp16. 0.6B
# position 1, 6 reps.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1"
timeout 400 bash scripts/device_ab_reps.sh 0.6b 6 "1" head kv mlp8 mlp16 kvmlp kvmlp16
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
