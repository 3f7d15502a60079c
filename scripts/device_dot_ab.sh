#!/usr/bin/env bash
# A/B of the `dot` examples in ONE device call, ABAB at each shape; one JSON line per run
# in $OUT/dot-ab.jsonl, each tagged with its build, and the autotuner's winners (per code
# hash) in $OUT/autotune-*.json.
# - A: .gpu/bin/{matmul,attention} as packed.
# - B: .gpu/bin/{matmul,attention}-B when packed (a candidate lowering built from another
#   commit), else the same binaries with the candidate `dot` lowerings on:
#   TESSERA_DOT=${DOT_B:-all} (cuda/mod.rs: DotOptions; the matmul example then also
#   tunes BK = 64 on 8 warps).
#   pack: bash scripts/pack_dot_ab.sh
#   device run: carry [".gpu"], command: bash scripts/device_dot_ab.sh
set -uo pipefail
source .gpu/device-env.sh > /dev/null
export TESSERA_CACHE_DIR=/tmp/tessera-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
J="$OUT/dot-ab.jsonl"; : > "$J"
status=0
one() {  # one TAG BIN ARGS... (TAG B without a -B binary: the option env)
  local tag=$1 bin=$2; shift 2
  local line env=()
  if [ "$tag" = B ] && [ ! -x "$bin-B" ]; then
    env=(env "TESSERA_DOT=${DOT_B:-all}")
  elif [ "$tag" = B ]; then
    bin="$bin-B"
  fi
  line=$(timeout 90 "${env[@]}" "$bin" --bench "$@" 2>> "$OUT/dot-ab.log") || { status=1; echo "FAILED: $tag $bin $*"; return; }
  echo "{\"build\":\"$tag\",\"dot\":\"${env[*]:-}\",\"result\":$line}" | tee -a "$J"
}
for args in "4096 4096 4096" "8192 8192 8192" "4000 4100 4200"; do
  for rep in 1 2; do
    one A .gpu/bin/matmul $args; one B .gpu/bin/matmul $args
  done
done
for args in "4 32 4096 128" "4 32 4096 128 --causal"; do
  for rep in 1 2; do
    one A .gpu/bin/attention $args; one B .gpu/bin/attention $args
  done
done
cp "$TESSERA_CACHE_DIR"/*.json "$OUT"/ 2>/dev/null || true
exit $status
