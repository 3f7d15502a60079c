#!/usr/bin/env bash
# Session 23 call 5 (binary dfb86d8): below one tile, o_proj's programs norm and rope q and k
# in one [2, D] tile (rope: TESSERA_ATTN_ROPE=1), the QKV stage without tickets, against
# the default (head): 0.6B and 1.7B 4 reps at position 1; at 4B the attention inside o_proj
# with the rope, 3 row blocks a program, forced on (ror: TESSERA_ATTN_IN_O=128
# TESSERA_ATTN_ROPE=1) against the default, 2 reps; the committed GPU tests.
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
run 0.6b 4 "1" head rope
run 1.7b 4 "1" head rope
run 4b 2 "1" head ror
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -10
echo "=== [$(date +%T)] done"
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
