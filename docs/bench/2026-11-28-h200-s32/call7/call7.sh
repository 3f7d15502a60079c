#!/usr/bin/env bash
# Session 32 call 7. Binary: .gpu/bin/tessera = main 66cb6f5's default (the decode step's
# generated code is session 30's). `tessera bench` on the H200 at 0.6B and, if time is
# left, 1.7B (no transformers peers this call; no prefill).
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
timeout 200 .gpu/bin/tessera bench --model $d --prompts none --json $ROOT/bench-0.6b.json > $ROOT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^tessera bench/,$p' $ROOT/bench-0.6b.log | head -16
left=$(( 480 - ($(date +%s) - T0) ))
if (( left > 200 )); then
  rm -rf /tmp/q06
  ensure_ckpt 1.7b "$ROOT/hf-1.7b.log"
  left=$(( 480 - ($(date +%s) - T0) ))
  echo "=== [$(date +%T)] bench 1.7b (limit ${left}s)"
  timeout $left .gpu/bin/tessera bench --model $(ckpt_dir 1.7b) --prompts none --positions 1,512 --json $ROOT/bench-1.7b.json > $ROOT/bench-1.7b.log 2>&1; echo rc=$?
  sed -n '/^tessera bench/,$p' $ROOT/bench-1.7b.log | head -14
fi
echo "=== [$(date +%T)] done ($(( $(date +%s) - T0 )) s)"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' --exclude=stdout.txt . && mv /tmp/all.tgz $ROOT/all.tgz && find $ROOT -mindepth 1 -maxdepth 1 ! -name all.tgz ! -name stdout.txt -exec rm -rf {} +
