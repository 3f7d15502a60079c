#!/usr/bin/env bash
# Session 23 call 1 (binary 696b5cc): the decode step whose o_proj programs compute the
# attention (attn_head_residual), launched below a position: head (never) against ino128
# (TESSERA_ATTN_IN_O=128: one tile at 0.6B/1.7B, the same bits) and ino512 (up to 4 tiles).
# 0.6B 4 reps at positions 1 and 256, 1.7B 2 reps; the committed GPU tests; one profile each
# at 0.6B context 1.
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
run 0.6b 4 "1 256" head ino128 ino512
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -12
mkdir -p $ROOT/prof
for n in head ino128; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 env TESSERA_CACHE_DIR=/tmp/tessera-cache $b tune --model $(ckpt_dir 0.6b) --tokens 64 --profile > $ROOT/prof/profile-$n.md 2> $ROOT/prof/profile-$n.err
  echo "profile $n rc=$?"; grep -iE "^\| *(qkv|attn|attention|o_proj|mlp|lm_head|rmsnorm|gemv|attn_head)" $ROOT/prof/profile-$n.md | head -12
done
run 1.7b 2 "1 256" head ino128 ino512
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
