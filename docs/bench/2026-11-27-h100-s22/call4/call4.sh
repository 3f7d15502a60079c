#!/usr/bin/env bash
# Binary e4b395a (attn_split_ahead ahead in every split); wrappers: tessera-ah64: TESSERA_ATTN_AHEAD=64, tessera-ah128: TESSERA_ATTN_AHEAD=128.
# Session 22 call 4: the attention's next K/V tile in flight (ah64: tiles of 64 positions,
# ah128: of 128, the rule's size) against the default (head), 0.6B, 6 reps at contexts 1,
# 512, 2048 and 8192; one profile each at 8192; 1.7B 2 reps at 2048 and 8192.
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
run 0.6b 6 "1 512 2048 8192" head ah64 ah128
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
d=$(ckpt_dir 0.6b)
export TESSERA_CACHE_DIR=/tmp/tessera-cache
mkdir -p $ROOT/prof
for n in head ah64 ah128; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 $b tune --model $d --tokens 64 --position 8192 --profile > $ROOT/prof/profile-$n.md 2>&1
  echo "profile $n"; grep -E "^one launch|attn_split|^\| [0-9]" $ROOT/prof/profile-$n.md
done
run 1.7b 2 "2048 8192" head ah64 ah128
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
