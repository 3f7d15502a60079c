#!/usr/bin/env bash
# Session 29 call 6. Binary: .gpu/bin/tessera = b557de1 (as call 5). 1.7B at position 512
# (the plain step): head against sp (TESSERA_QKV_PAIRS_SPLIT=1: the QKV pairs and
# attn_split_scaled; ptxas spills 52 / 72 bytes there, head 12 / 12), 4 reps.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
echo "=== [$(date +%T)] 1.7b A/B"
timeout 400 bash scripts/device_ab_reps.sh 1.7b 4 "512" head sp
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
