#!/usr/bin/env bash
# Everything a session's final device call checks, most important first, each part under
# its own time limit so the whole fits one call (device run timeout_s 600):
#   ab        the packed binary (`head`) against .gpu/bin/tessera-BASE (if present) at
#             context 512, two repetitions each, plus each one's profile (device_ab.sh)
#   decode    0.6b: the real-shape GPU test against the fp32 oracle and transformers'
#             bf16 bar, and `tessera bench` (megakernel beside the kernels engine)
#   shapes    the real-shape GPU test at the larger shapes in $SHAPES (default: 4b)
#   serve     one server with the megakernel engine, streaming requests (device_serve.sh)
#   dot       the dot GPU tests, examples and timings (device_dot.sh), cut at its limit
#   committed the GPU tests on the committed checkpoints
#   device run: carry [".gpu"], command: BASE=6396b92 bash scripts/device_validate.sh [PART...]
# Logs under $OUT; at the end $OUT/all.tgz holds every log (files beyond 8 do not come back).
set -uo pipefail
parts=("$@")
[[ ${#parts[@]} == 0 ]] && parts=(ab decode shapes serve dot committed)
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
source .gpu/device-env.sh > "$OUT/env.txt" 2>&1
export PEERS=${PEERS:-0}
t0=$SECONDS
run() {  # run NAME LIMIT CMD...: its output to $OUT/part-NAME.log
  local name=$1 limit=$2
  shift 2
  echo "=== [$((SECONDS - t0))s] $name: $*"
  timeout --signal=KILL "$limit" "$@" > "$OUT/part-$name.log" 2>&1
  echo "--- [$((SECONDS - t0))s] $name rc=$?"
}
knobs=(--warps 16 --elems 64 --bk-max 4096 --ctas-per-sm 1)
for p in "${parts[@]}"; do
  case $p in
  ab)
    names=(head)
    [[ -n ${BASE:-} && -x .gpu/bin/tessera-$BASE ]] && names+=("$BASE")
    PROBE=0 GENERATE=0 run ab 150 bash scripts/device_ab.sh 0.6b "${names[@]}" -- "${knobs[@]}" --position 512 --tokens 128
    grep -E "^=== |^\| [0-9]|^rc=" "$OUT/part-ab.log" | grep -v "^=== \[.*hf_ref"
    ;;
  decode)
    BENCH=1 run decode 120 bash scripts/device_decode.sh 0.6b
    grep -E "over [0-9]+ prompts|test result|panicked|^\||floor|kernels =" "$OUT/part-decode.log" | tail -20
    ;;
  shapes)
    for s in ${SHAPES:-4b}; do
      BENCH=0 run "shape-$s" 130 bash scripts/device_decode.sh "$s"
      grep -E "over [0-9]+ prompts|test result|panicked|assert" "$OUT/part-shape-$s.log" | tail -6
    done
    ;;
  serve)
    run serve 50 bash scripts/device_serve.sh /tmp/q06
    tail -8 "$OUT/part-serve.log"
    ;;
  dot)
    run dot 130 bash scripts/device_dot.sh
    grep -E "^test |test result|panicked|^\{|FAILED|max|err" "$OUT/part-dot.log" | tail -30
    ;;
  committed)
    run committed 120 bash scripts/device_decode.sh committed
    grep -E "^test |test result|panicked" "$OUT/part-committed.log" | tail -15
    ;;
  *) echo "unknown part $p" ;;
  esac
done
echo "=== [$((SECONDS - t0))s] done"
tar_out
