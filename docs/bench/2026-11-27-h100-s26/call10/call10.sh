#!/usr/bin/env bash
# Session 26 call 10 (75a1407, the session's default): `tessera bench` at 8B.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 8b "$ROOT/hf-8b.log"
echo "=== [$(date +%T)] bench 8b"
timeout 400 .gpu/bin/tessera bench --model $(ckpt_dir 8b) --json $ROOT/bench-8b.json > $ROOT/bench-8b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-8b.log | head -30
echo "=== [$(date +%T)] done"
