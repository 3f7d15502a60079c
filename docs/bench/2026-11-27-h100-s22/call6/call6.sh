#!/usr/bin/env bash
# Binary 080e807; wrapper tessera-noah: TESSERA_ATTN_AHEAD=0.
# Session 22 call 6: the decode step whose attention loads its tiles ahead, launched from
# SPLITS x BLOCK_N positions on (head, the candidate default) against never (noah:
# TESSERA_ATTN_AHEAD=0): 0.6B 6 reps at 1, 512, 2048, 8192; 1.7B 2 reps; 4B 2 reps at 1 and
# 8192; the committed GPU tests; `tessera bench` at 0.6B (decode only).
set -uo pipefail
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
run 0.6b 6 "1 512 2048 8192" head noah
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -12
mkdir -p $ROOT/b
timeout 200 env TESSERA_CACHE_DIR=$(mktemp -d) .gpu/bin/tessera bench --model $(ckpt_dir 0.6b) --prompts none --json $ROOT/b/bench-0.6b.json > $ROOT/b/bench-0.6b.log 2>&1; echo "bench rc=$?"
sed -n '/^tessera bench/,$p' $ROOT/b/bench-0.6b.log | head -20
run 1.7b 2 "1 512 2048 8192" head noah
run 4b 2 "1 8192" head noah
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
