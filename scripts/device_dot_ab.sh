#!/usr/bin/env bash
# A/B of the `dot` examples in ONE device call, ABAB at each shape; one JSON line per run
# in $OUT/dot-ab.jsonl, each tagged with its build, commit and B's environment, and the
# autotuner's winners (per code hash) in $OUT/autotune-*.json.
# - A: .gpu/bin/{matmul,attention}, built from .gpu/commit;
# - B: .gpu/bin/{matmul,attention}-B when packed, built from .gpu/commit-B
#     pack: bash scripts/pack_dot_ab.sh (at A), then bash scripts/pack_dot_ab.sh B (at B);
#   else A's binaries with a candidate lowering's option on: env $B_ENV (NAME=VALUE)
#     pack: bash scripts/pack_dot_ab.sh (once)
#   device run: carry [".gpu"], command: bash scripts/device_dot_ab.sh
#   (without -B binaries: B_ENV=NAME=VALUE bash scripts/device_dot_ab.sh)
set -uo pipefail
source .gpu/device-env.sh > /dev/null
export TESSERA_CACHE_DIR=/tmp/tessera-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
J="$OUT/dot-ab.jsonl"; : > "$J"
for b in matmul attention; do
  [[ -x .gpu/bin/$b ]] || { echo "missing .gpu/bin/$b (scripts/pack_dot_ab.sh)"; exit 1; }
done
commit_A=$(cat .gpu/commit 2>/dev/null)
if [[ -x .gpu/bin/matmul-B && -x .gpu/bin/attention-B ]]; then
  commit_B=$(cat .gpu/commit-B 2>/dev/null); b_env=
else
  commit_B=$commit_A
  b_env=${B_ENV:-}
  [[ $b_env == *=* ]] || { echo "no -B build packed: set B_ENV=NAME=VALUE (a candidate's option) or pack B (scripts/pack_dot_ab.sh B)"; exit 1; }
fi
echo "A: $commit_A  B: $commit_B ${b_env:+with $b_env}" | tee "$OUT/commits.txt"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > "$OUT/gpu.csv" 2>&1
status=0
one() {  # one TAG BIN ARGS... (B: BIN-B, or BIN with $b_env)
  local tag=$1 bin=$2; shift 2
  local line commit=$commit_A env=(env)
  if [ "$tag" = B ]; then
    commit=$commit_B
    if [ -n "$b_env" ]; then env=(env "$b_env"); else bin="$bin-B"; fi
  fi
  line=$(timeout 90 "${env[@]}" "$bin" --bench "$@" 2>> "$OUT/dot-ab.log") || { status=1; echo "FAILED: $tag $bin $*"; return; }
  echo "{\"build\":\"$tag\",\"commit\":\"$commit\",\"env\":\"$([ "$tag" = B ] && echo "$b_env")\",\"result\":$line}" | tee -a "$J"
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
