#!/usr/bin/env bash
# Binary d0bb838 (attn_split_ahead ahead only where a split streams more than one tile, reverted in 14a7750); wrappers: tessera-hy64: TESSERA_ATTN_AHEAD=64, tessera-hy128: TESSERA_ATTN_AHEAD=128 (then tile positions).
# Session 22 call 5: the attention ahead only where a split streams more than one tile
# (hy128: tiles of 128 positions, the rule's; hy64: of 64) against the default (head):
# 0.6B 6 reps at contexts 1, 512, 2048, 8192; 1.7B 2 reps at the same; 4B 2 reps at 1 and 8192.
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
run 0.6b 6 "1 512 2048 8192" head hy128 hy64
run 1.7b 2 "1 512 2048 8192" head hy128 hy64
run 4b 2 "1 8192" head hy128
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
