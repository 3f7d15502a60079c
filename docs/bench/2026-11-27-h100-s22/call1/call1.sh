#!/usr/bin/env bash
# Session 22 call 1: decode one step ahead (ra) against the default (head) at 0.6B (6 reps)
# and 1.7B (4 reps), contexts 1 and 512; the MLP's (wib1) and QKV's (wib2) waits in their
# bodies beside o_proj's; one profile; generate tokens/s; the GPU tests (committed).
# NOTE: this call's `ra` numbers are void: the readback did not wait (fixed in e0dcdaf).
# Wrappers: tessera-ra: TESSERA_RUN_AHEAD=1; tessera-wib1:
# TESSERA_WAIT_IN_BODY=gemv_head_residual,rmsnorm_mlp_tiles; tessera-wib2:
# TESSERA_WAIT_IN_BODY=gemv_head_residual,rmsnorm_qkv_rope.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export ROOT
run() {  # shape reps names...
  local shape=$1 reps=$2; shift 2
  for i in $(seq 1 $(( reps / 2 ))); do
    export OUT=$ROOT/$shape-ab$i
    PROBE=0 GENERATE=0 PROFILE=0 POSITIONS="1 512" bash scripts/device_ab.sh $shape "$@" -- --tokens 128 > $ROOT/$shape-ab$i.log 2>&1
    rm -f $OUT/all.tgz
  done
  for n in "$@"; do for p in 1 512; do
    v=$(for f in $ROOT/$shape-ab*/tune-$n-p$p-*.md; do grep -E '^\| [0-9]' $f | head -1 | cut -d'|' -f2; done | sort -n | tr -d ' ' | tr '\n' ' ')
    echo "$shape $n p$p: $v"
  done; done
}
run 0.6b 6 head ra wib1 wib2
source .gpu/device-env.sh > /dev/null 2>&1
source scripts/device_ckpt.sh
d=$(ckpt_dir 0.6b)
export TESSERA_CACHE_DIR=/tmp/tessera-cache
mkdir -p $ROOT/gen
for r in 1 2; do for n in head ra; do
  b=.gpu/bin/tessera; [[ $n != head ]] && b=.gpu/bin/tessera-$n
  timeout 120 $b generate --model $d --prompt-ids 1 --max-new-tokens 256 --json > $ROOT/gen/$n-$r.json 2> $ROOT/gen/$n-$r.err
  echo "generate 0.6b $n rep $r rc=$? $(grep -o '"decode_tokens_per_s":[0-9.]*' $ROOT/gen/$n-$r.json)"
done; done
timeout 120 .gpu/bin/tessera tune --model $d --tokens 128 --profile > $ROOT/gen/profile-head.md 2>&1
grep -E "^one launch|^\| stage|^\| [0-9]" $ROOT/gen/profile-head.md
run 1.7b 4 head ra wib1 wib2
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -12
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
