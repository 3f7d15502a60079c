#!/usr/bin/env bash
# Session 29 call 7. Binary: as calls 5-6. The GPU tests with sp on (TESSERA_QKV_PAIRS_SPLIT=1),
# the real-shape test at 1.7B.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 1.7b "$ROOT/hf-1.7b.log"
d=$(ckpt_dir 1.7b)
echo "=== [$(date +%T)] GPU tests with sp (real shape at 1.7B)"
timeout 330 env TESSERA_QKV_PAIRS_SPLIT=1 TESSERA_HF_CKPT=$d .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked|first-logit" $ROOT/tests.log | tail -14
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt ! -name tests.log -exec rm -rf {} +
