#!/usr/bin/env bash
# Session 22 call 2 (binary e0dcdaf): decode one step ahead (ra, its readback fixed) against
# the default (head): 0.6B 6 reps, 1.7B 4 reps, 4B and 8B 2 reps, contexts 1 and 512;
# generate tokens/s and ids at 0.6B; the GPU tests (committed); at 4B o_proj per head's row
# blocks spread (ohtiles); at 8B o_proj per head (oh) and spread (ohtiles8).
# Wrappers: tessera-ra: TESSERA_RUN_AHEAD=1; tessera-ohtiles: TESSERA_O_HEADS_TILES=0;
# tessera-oh: TESSERA_O_HEADS=1; tessera-ohtiles8: TESSERA_O_HEADS=1 TESSERA_O_HEADS_TILES=0.
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
run 0.6b 6 head ra
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
python3 - <<'PY'
import json, os
r = os.environ["ROOT"] + "/gen/"
ids = {}
for n in ("head", "ra"):
    for k in (1, 2):
        try:
            j = json.load(open(f"{r}{n}-{k}.json"))
            ids[(n, k)] = j.get("generated_ids") or j.get("ids") or j.get("tokens")
        except Exception as e:
            print("json", n, k, e)
print("generated ids equal across head/ra and reps:", len({str(v) for v in ids.values()}) == 1, {k: (len(v) if v else None) for k, v in ids.items()})
PY
export OUT=$ROOT/tests
PEERS=0 BENCH=0 bash scripts/device_decode.sh committed > $ROOT/tests.log 2>&1; rm -f $OUT/all.tgz
grep -E "test result|^test |FAILED|panicked" $ROOT/tests/*.log | tail -12
run 1.7b 4 head ra
run 4b 2 head ra ohtiles
run 8b 2 head ra oh ohtiles8
cd $ROOT && tar czf /tmp/all.tgz --exclude='*.safetensors' --exclude='expected-*.json' . && mv /tmp/all.tgz $ROOT/all.tgz
