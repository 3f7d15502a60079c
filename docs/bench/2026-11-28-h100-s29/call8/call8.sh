#!/usr/bin/env bash
# Session 29 call 8. Binary: .gpu/bin/tessera = 93eb9a7 (the QKV pairs the default: inside
# o_proj up to hidden 1024, in the split attention up to 2048; PTX identical to the measured
# arms). `tessera bench` at 0.6B (transformers from session 25) and 1.7B.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
source .gpu/device-env.sh > $ROOT/env.txt 2>&1
source scripts/device_ckpt.sh
export TESSERA_CACHE_DIR=/tmp/tessera-cache
ensure_ckpt 0.6b "$ROOT/hf-0.6b.log"
d=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d --peers .gpu/peers-0.6b.json --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -14
left=$(( 400 - ($(date +%s) - T0) ))
if (( left > 150 )); then
  rm -rf /tmp/q06
  ensure_ckpt 1.7b "$ROOT/hf-1.7b.log"
  left=$(( 400 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] bench 1.7b (limit ${left}s)"
  timeout $left .gpu/bin/tessera bench --model $(ckpt_dir 1.7b) --json $ROOT/bench-1.7b.json > $ROOT/bench-1.7b.log 2>&1; echo rc=$?
  sed -n '/^tessera bench/,$p' $ROOT/bench-1.7b.log | head -14
fi
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
