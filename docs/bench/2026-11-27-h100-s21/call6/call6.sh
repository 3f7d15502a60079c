#!/usr/bin/env bash
# Session 21 call 6: the knobs re-swept on the new 0.6B step (o_proj per head): attention
# splits 8 (the rule) / 4 / 16 at contexts 1, 512 and 2048, and the wait prefetch 4 / 2 / 8 MiB
# at 1 and 512; 4 repetitions each, every configuration in one tune process per repetition.
set -uo pipefail
ROOT=${OUT:-/tmp/out}
export OUT=$ROOT/s
source .gpu/device-env.sh > /dev/null 2>&1
export TESSERA_CACHE_DIR=/tmp/tessera-cache
source scripts/device_ckpt.sh
mkdir -p $OUT
ensure_ckpt 0.6b "$OUT/hf-0.6b.log"
for rep in 1 2 3 4; do
  for p in 1 512 2048; do
    timeout 120 .gpu/bin/tessera tune --model /tmp/q06 --tokens 128 --position $p --attn-splits 0,4,16 > $OUT/splits-p$p-$rep.md 2> $OUT/splits-p$p-$rep.err
    echo "splits p$p rep $rep: $(grep -E '^\| [0-9]' $OUT/splits-p$p-$rep.md | awk -F'|' '{print $8 "=" $2}' | tr -s ' ' | tr '\n' ' ')"
  done
  for p in 1 512; do
    timeout 120 .gpu/bin/tessera tune --model /tmp/q06 --tokens 128 --position $p --wait-prefetch-mib 4,2,8 > $OUT/wp-p$p-$rep.md 2> $OUT/wp-p$p-$rep.err
    echo "prefetch p$p rep $rep: $(grep -E '^\| [0-9]' $OUT/wp-p$p-$rep.md | awk -F'|' '{print $7 "=" $2}' | tr -s ' ' | tr '\n' ' ')"
  done
done
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
