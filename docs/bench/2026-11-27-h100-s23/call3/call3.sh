#!/usr/bin/env bash
# Session 23 call 3 (binary a15c5af): the attention-inside-o_proj specialisation with
# K/V tiles of 64 positions (b64: TESSERA_ATTN_IN_O_BLOCK_N=64) against its 128 (head), 0.6B
# 4 reps at positions 1 and 64; `tessera bench` at 0.6B (transformers' figures from call 2's
# hf_peers.py run, another H100 of the same kind) and 1.7B with every specialisation loaded
# before the timed rows; compute-sanitizer memcheck and racecheck on the specialisation
# (tune at position 0, 2 steps).
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
run 0.6b 4 "1 64" head b64
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/d
mkdir -p $OUT
d06=$(ckpt_dir 0.6b)
echo "=== [$(date +%T)] bench 0.6b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $d06 --peers .gpu/peers-0.6b.json --json $OUT/bench-0.6b.json > $OUT/bench-0.6b.log 2>&1; echo rc=$?
sed -n '/^| context/,/^$/p' $OUT/bench-0.6b.log
ensure_ckpt 1.7b "$OUT/hf-1.7b.log"
echo "=== [$(date +%T)] bench 1.7b"
timeout 150 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $(ckpt_dir 1.7b) --prompts none --json $OUT/bench-1.7b.json > $OUT/bench-1.7b.log 2>&1; echo rc=$?
sed -n '/^read bandwidth/p;/^| context/,/^$/p' $OUT/bench-1.7b.log
cs=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
for tool in memcheck racecheck; do
  left=$(( 575 - ($(date +%s) - T0) ))
  [[ $tool == memcheck ]] && lim=$(( left < 100 ? left : 100 ))
  [[ $tool == racecheck ]] && lim=$left
  echo "=== [$(date +%T)] $tool at position 0 (limit ${lim}s)"
  timeout --signal=KILL $lim "$cs" --tool $tool --error-exitcode 9 .gpu/bin/tessera tune --model $d06 --tokens 2 --position 0 --watchdog-ms 120000 > $OUT/sanitize-$tool.log 2>&1; echo rc=$?
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ms/token|^\| [0-9]" $OUT/sanitize-$tool.log | head -4
done
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
