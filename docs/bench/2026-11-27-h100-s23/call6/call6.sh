#!/usr/bin/env bash
# Session 23 call 6 (binary 8b6bdf8): at 1.7B the rope kernel's wait in its body
# (wibr) against the default, 2 reps, and the real-shape test; at 4B the real-shape test and
# `tessera bench` (decode) on the new default; at 8B the specialisation forced on (ino:
# TESSERA_ATTN_IN_O=128: o_proj per head with the rope inside it, by rows elsewhere)
# against the default, 2 reps; the committed GPU tests with the time left.
set -uo pipefail
T0=$(date +%s)
ROOT=${OUT:-/tmp/out}
export ROOT
run() {  # shape reps positions names...
  local shape=$1 reps=$2 positions=$3; shift 3
  for i in $(seq 1 $(( reps / 2 ))); do
    export OUT=$ROOT/$shape-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="$positions" bash scripts/device_ab.sh $shape "$@" -- --tokens 128 > $ROOT/$shape-ab$i.log 2>&1
    rm -f $OUT/all.tgz
  done
  for n in "$@"; do for p in $positions; do
    v=$(for f in $ROOT/$shape-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done; done
}
real() {  # shape
  echo "=== [$(date +%T)] real shape $1"
  timeout 200 env TESSERA_HF_CKPT=$(ckpt_dir $1) TESSERA_CACHE_DIR=/tmp/tc .gpu/bin/test-gpu_decode --ignored --exact gpu_megakernel_matches_transformers_at_real_shape --nocapture > $ROOT/d/real-$1.log 2>&1; echo rc=$?
  grep -E "first-logit|test result|panicked" $ROOT/d/real-$1.log | tail -3
}
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
mkdir -p $ROOT/d
run 1.7b 2 "1" head wibr
real 1.7b
ensure_ckpt 4b "$ROOT/d/hf-4b.log"
real 4b
echo "=== [$(date +%T)] bench 4b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $(ckpt_dir 4b) --prompts none --json $ROOT/d/bench-4b.json > $ROOT/d/bench-4b.log 2>&1; echo rc=$?
sed -n '/^read bandwidth/p;/^| context/,/^$/p' $ROOT/d/bench-4b.log
run 8b 2 "1" head ino
left=$(( 575 - ($(date +%s) - T0) ))
echo "=== [$(date +%T)] committed GPU tests (limit ${left}s)"
timeout --signal=KILL $left env -u TESSERA_HF_CKPT TESSERA_CACHE_DIR=/tmp/tct .gpu/bin/test-gpu_decode --ignored --test-threads=1 --nocapture > $ROOT/d/tests.log 2>&1; echo rc=$?
grep -E "test result|^test |FAILED|panicked" $ROOT/d/tests.log | tail -10
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
