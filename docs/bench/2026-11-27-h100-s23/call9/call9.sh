#!/usr/bin/env bash
# Session 23 call 9 (binary 643ca6a, the final commit): the committed GPU tests and
# the real-shape test at 0.6B on attn_head_residual through attend_head_cur (b83cef6 on).
set -uo pipefail
ROOT=${OUT:-/tmp/out}
mkdir -p $ROOT/d
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
ensure_ckpt 0.6b "$ROOT/d/hf-0.6b.log"
echo "=== [$(date +%T)] real shape 0.6b"
timeout 150 env TESSERA_HF_CKPT=$(ckpt_dir 0.6b) TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $ROOT/d/real-0.6b.log 2>&1; echo rc=$?
grep -E "first-logit|test result|panicked" $ROOT/d/real-0.6b.log | tail -3
echo "=== [$(date +%T)] committed GPU tests"
timeout 250 env -u TESSERA_HF_CKPT TESSERA_CACHE_DIR=/tmp/tct .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/d/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/d/tests.log | tail -10
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
