#!/usr/bin/env bash
# A/B of two builds of the `dot` examples in ONE device call: .gpu/bin/{matmul,attention}
# (A: the packed commit) against .gpu/bin/{matmul,attention}-B (B: a candidate lowering,
# built here from another commit and copied in), ABAB at each shape. One JSON line per run
# in $OUT/dot-ab.jsonl, each tagged with its build.
#   device run: carry [".gpu"], command: bash scripts/device_dot_ab.sh
set -uo pipefail
source .gpu/device-env.sh > /dev/null
export TESSERA_CACHE_DIR=/tmp/tessera-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
J="$OUT/dot-ab.jsonl"; : > "$J"
status=0
one() {  # one TAG BIN ARGS...
  local tag=$1 bin=$2; shift 2
  local line
  line=$(timeout 90 "$bin" --bench "$@" 2>> "$OUT/dot-ab.log") || { status=1; echo "FAILED: $tag $bin $*"; return; }
  echo "{\"build\":\"$tag\",\"result\":$line}" | tee -a "$J"
}
for args in "4096 4096 4096" "8192 8192 8192" "4000 4100 4200"; do
  for rep in 1 2; do
    one A .gpu/bin/matmul $args; one B .gpu/bin/matmul-B $args
  done
done
for args in "4 32 4096 128" "4 32 4096 128 --causal"; do
  for rep in 1 2; do
    one A .gpu/bin/attention $args; one B .gpu/bin/attention-B $args
  done
done
exit $status
