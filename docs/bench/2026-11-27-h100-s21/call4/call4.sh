#!/usr/bin/env bash
# Session 21 call 4: 8B A/B main / head (o_proj per head by default), 4 reps at contexts 1 and
# 512; the real-shape test of the new default at 8B, 4B and 1.7B.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
for i in 1 2; do
  export OUT=$ROOT/8b-ab$i
  PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh 8b main head -- --tokens 64 > $ROOT/8b-ab$i.log 2>&1
  rm -f $OUT/all.tgz
done
for n in main head; do for p in 1 512; do
  v=$(for f in $ROOT/8b-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
  echo "8b $n p$p: $v"
done; done
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh 8b 4b 1.7b > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -hE "over 4 prompts|^test .*real_shape|test result" $ROOT/tests/gpu-megakernel-*.log
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
