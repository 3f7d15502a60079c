#!/usr/bin/env bash
# `tessera tune` on the GPU machine, in ONE device call, over binaries built here by
# scripts/pack_gpu.sh (carried in .gpu/).
#   device run: carry [".gpu"], command: bash scripts/device_tune.sh SHAPE [tune flags...]
# SHAPE: 0.6b, 1.7b, 4b or 8b: hf_reference.py writes a random-weight checkpoint of that
# shape to /tmp/q-SHAPE (no timing of transformers), then `tessera tune --model` runs with
# the flags given (e.g. --warps 8,16 --elems 16,32 --profile). Output under $OUT.
set -uo pipefail
shape=${1:?usage: device_tune.sh SHAPE [tune flags...]}
shift
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
cp .gpu/commit "$OUT/commit" 2>/dev/null || true
d=/tmp/q-$shape
if [[ ! -f $d/config.json ]]; then
  echo "=== [$(date +%T)] hf_reference.py --shape $shape --no-bench"
  python3 .gpu/hf_reference.py --shape "$shape" --out "$d" --steps 64 --no-bench > "$OUT/hf-$shape.log" 2>&1 \
    || { tail -20 "$OUT/hf-$shape.log"; exit 1; }
fi
echo "=== [$(date +%T)] tessera tune --model $d $*"
TESSERA_CACHE_DIR=/tmp/tessera-cache .gpu/bin/tessera tune --model "$d" --json "$OUT/tune-$shape.json" "$@" \
  > "$OUT/tune-$shape.md" 2> "$OUT/tune-$shape.err"
rc=$?
echo "--- [$(date +%T)] rc=$rc"
tail -5 "$OUT/tune-$shape.err"
cat "$OUT/tune-$shape.md"
