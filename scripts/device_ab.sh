#!/usr/bin/env bash
# Decode A/B in ONE device call: `tessera tune` of several binaries with the same knobs,
# two repetitions each in alternation, beside the hand-written ceiling probe
# (scripts/probe/chain.cu) and the kernels engine, on one random-weight checkpoint.
#   here:  build each binary, copy it to .gpu/bin/tessera-NAME; NAME `head` is the packed
#          .gpu/bin/tessera (scripts/pack_gpu.sh). One name alone is a plain `tessera tune`
#          run, e.g. `PROBE=0 GENERATE=0 bash scripts/device_ab.sh 0.6b head -- --profile`.
#   device run: carry [".gpu"], command: bash scripts/device_ab.sh SHAPE NAME... [-- tune flags]
# PROBE=0 skips the hand-written probe, GENERATE=0 the `generate` runs, PROFILE=0 the profiles.
# POSITIONS="1 512 2048 8192" repeats the A/B at each context (`--position`), rep by rep, so a
# call cut short still has one repetition of every pair. Output under $OUT, one log per run.
set -uo pipefail
shape=${1:?usage: device_ab.sh SHAPE NAME... [-- tune flags]}
shift
names=()
while [[ $# -gt 0 && $1 != -- ]]; do names+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
flags=("$@")
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"
export TESSERA_CACHE_DIR=/tmp/tessera-cache RUST_BACKTRACE=1
source scripts/device_ckpt.sh
ensure_ckpt "$shape" "$OUT/hf-$shape.log" || exit 1
d=$(ckpt_dir "$shape")

bin() { if [[ $1 == head ]]; then echo .gpu/bin/tessera; else echo ".gpu/bin/tessera-$1"; fi; }

# The ceiling, by hand (built here with the machine's nvcc; a binary built beside may come along).
if [[ ${PROBE:-1} != 0 && -f scripts/probe/chain.cu ]]; then
  echo "=== [$(date +%T)] probe: chain.cu"
  nv=$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)
  if "$nv" -O3 -gencode=arch=compute_90,code=sm_90 -o /tmp/chain scripts/probe/chain.cu > "$OUT/chain-build.log" 2>&1; then
    timeout 240 /tmp/chain --reps 20 2>&1 | tee "$OUT/chain.log"
  else
    tail -20 "$OUT/chain-build.log"
    [[ -x .gpu/bin/chain ]] && timeout 240 .gpu/bin/chain --reps 20 2>&1 | tee "$OUT/chain.log"
  fi
fi

# The A/B: every binary twice, in alternation (ABAB), same knobs.
positions=(${POSITIONS:-})
[[ ${#positions[@]} == 0 ]] && positions=(-)
for rep in 1 2; do
  for p in "${positions[@]}"; do
    at=()
    [[ $p != - ]] && at=(--position "$p")
    for n in "${names[@]}"; do
      tag=$n; [[ $p != - ]] && tag=$n-p$p
      echo "=== [$(date +%T)] tune $n rep $rep ${at[*]}: ${flags[*]}"
      timeout 300 "$(bin "$n")" tune --model "$d" "${flags[@]}" "${at[@]}" --json "$OUT/tune-$tag-$rep.json" \
        > "$OUT/tune-$tag-$rep.md" 2> "$OUT/tune-$tag-$rep.err"
      echo "rc=$?"; tail -3 "$OUT/tune-$tag-$rep.err"; grep -E "^\|" "$OUT/tune-$tag-$rep.md" | tail -1
    done
  done
done
# One profile each (where the time goes), and the kernels engine beside the megakernel.
[[ ${PROFILE:-1} == 0 ]] && names=()
for n in "${names[@]}"; do
  echo "=== [$(date +%T)] profile $n"
  timeout 300 "$(bin "$n")" tune --model "$d" "${flags[@]}" --profile > "$OUT/profile-$n.md" 2> "$OUT/profile-$n.err"
  echo "rc=$?"
  [[ ${GENERATE:-1} == 0 ]] && continue
  for e in kernels megakernel; do
    timeout 120 "$(bin "$n")" generate --model "$d" --engine $e --prompt-ids 1 --max-new-tokens 256 --json \
      > "$OUT/generate-$n-$e.json" 2> "$OUT/generate-$n-$e.err"
    echo "generate $n $e rc=$? $(grep -o '"decode_tokens_per_s":[0-9.]*' "$OUT/generate-$n-$e.json")"
  done
done
echo "=== [$(date +%T)] done"
tar_out
