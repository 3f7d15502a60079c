#!/usr/bin/env bash
# Session 30 call 1. Binary: .gpu/bin/tessera = 8d04c75 (main's default; PTX identical to
# fed130e's). Arms (env wrappers of it): kv = TESSERA_KV_PREFETCH=128 (the QKV pairs' k/v
# programs put earlier K/V rows into L2), kv1k = 1024, mlp8 / mlp16 = TESSERA_MLP_PREFETCH
# (o_proj's programs put their CTA's next MLP program's first 8 / 16 rows of gate, up and
# down into L2 while attending), kvmlp = kv + mlp8. 0.6B, 6 reps: position 1 (attention
# inside o_proj), position 512 (the split attention).
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 0.6b A/B p1"
timeout 300 bash scripts/device_ab_reps.sh 0.6b 6 "1" head kv mlp8 mlp16 kvmlp
echo "=== [$(date +%T)] 0.6b A/B p512"
ROOT=$ROOT/p512 && mkdir -p $ROOT && timeout 200 bash scripts/device_ab_reps.sh 0.6b 6 "512" head kv kv1k
ROOT=${OUT:-/tmp/out}
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
