#!/usr/bin/env bash
# Record the distributed-training fixtures on a machine with >= 2 GPUs and nsys on PATH, and trim them.
#
#   OUT=/some/dir bash workloads/record_ddp.sh [names...]
#
# Names: ddp_overlap ddp_serial ddp_straggler tp fsdp pipeline (one export holding every rank: nsys
# runs torchrun, which starts one process a GPU) and ddp_overlap_ranks ddp_straggler_ranks (one export
# per rank: torchrun runs one nsys a rank, -o <name>_rank%q{RANK}).
# A name may carry the workload's sizes: ddp_serial_b1024 and ddp_overlap_b1024 run --batch 1024
# (suffixes _b<rows> _w<width> _l<layers> _c<NCCL CTAs>, in any order).
# Writes $OUT/fixtures.tar (tests/fixtures/traces/<name>/ folders made by trim.py) and $OUT/logs.tar.xz.
#
#   AB=5 OUT=/some/dir bash workloads/record_ddp.sh ddp_serial ddp_overlap [ddp_serial_b1024 ddp_overlap_b1024 ...]
#
# With AB=N nothing is recorded: the names' programs run N rounds, each round every name once in the
# order given (no nsys), and their `[ddp]` timing lines go to $OUT/ab.txt, each after a line
# "== round R name". Each program runs under `timeout` (REC_TIMEOUT s); a recording or a round is skipped
# once BUDGET_S seconds have passed since the start.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_ddp}
NGPU=${NGPU:-2}
REC_TIMEOUT=${REC_TIMEOUT:-120}
BUDGET_S=${BUDGET_S:-100000}
START=$(date +%s)
NAMES=${*:-ddp_overlap ddp_serial ddp_straggler ddp_overlap_ranks ddp_straggler_ranks}
mkdir -p "$OUT" "$T"
# NVLink multicast off (the machine's rule: it can take the host's GPUs out of service)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HERE=$(cd "$(dirname "$0")" && pwd)
NSYS_FLAGS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite -f true)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
args_of() {
  local base=$1 sizes=""
  while [[ $base =~ ^(.+)_([bwlc])([0-9]+)$ ]]; do  # trailing size suffixes
    case ${BASH_REMATCH[2]} in c) sizes="--nccl-ctas ${BASH_REMATCH[3]} $sizes" ;; b) sizes="--batch ${BASH_REMATCH[3]} $sizes" ;; w) sizes="--width ${BASH_REMATCH[3]} $sizes" ;;
      l) sizes="--layers ${BASH_REMATCH[3]} $sizes" ;; esac
    base=${BASH_REMATCH[1]}
  done
  case $base in
    ddp_overlap|ddp_overlap_ranks) echo "--mode ddp $sizes" ;;
    ddp_serial) echo "--mode serial $sizes" ;;
    ddp_straggler|ddp_straggler_ranks) echo "--mode ddp --slow-rank 1 --slow-ms 8 $sizes" ;;
    tp) echo "--mode tp $sizes" ;;
    fsdp) echo "--mode fsdp $sizes" ;;
    pipeline) echo "--mode pipeline $sizes" ;;
    *) return 1 ;;
  esac
}
over_budget() { (( $(date +%s) - START > BUDGET_S )); }
if [[ -n ${AB:-} ]]; then  # timing only, no nsys: AB rounds of every name, alternating
  echo "GPU: $NGPU x $GPU" > "$OUT/ab.txt"
  python3 -c "import torch; print('torch', torch.__version__, 'nccl', torch.cuda.nccl.version())" >> "$OUT/ab.txt"
  for r in $(seq 1 "$AB"); do
    for name in $NAMES; do
      over_budget && { echo "budget spent: round $r $name skipped" | tee -a "$OUT/ab.txt"; continue; }
      a=$(args_of "$name") || { echo "unknown name $name"; exit 2; }
      echo "== round $r $name: ddp.py $a" >> "$OUT/ab.txt"
      # shellcheck disable=SC2086
      (cd "$HERE" && timeout "$REC_TIMEOUT" python3 -m torch.distributed.run --nproc_per_node="$NGPU" ddp.py $a) 2>&1 \
        | grep '\[ddp\]' >> "$OUT/ab.txt"
    done
    echo "round $r done at $(( $(date +%s) - START )) s"
  done
  cat "$OUT/ab.txt"
  exit 0
fi
NSYSV=$(nsys --version)
provenance() {  # name command
  python3 - "$1" "$2" "$GPU" "$NSYSV" "$NGPU" > "$T/$1.json" <<'PY'
import json, sys
name, cmd, gpu, nsysv, ngpu = sys.argv[1:]
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": f"{ngpu}x {g[0]}", "driver": g[1], "gpu_memory": g[2],
                  "nsys_version": nsysv}))
PY
}
rc=0
for name in $NAMES; do
  a=$(args_of "$name") || { echo "unknown recording $name"; rc=2; continue; }
  over_budget && { echo "budget spent: $name not recorded"; continue; }
  t0=$(date +%s.%N)
  if [[ $name == *_ranks ]]; then
    base=${name%_ranks}
    cmd="torchrun --nproc_per_node=$NGPU --no-python nsys profile ${NSYS_FLAGS[*]} -o ${base}_rank%q{RANK} python3 workloads/ddp.py $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && timeout "$REC_TIMEOUT" python3 -m torch.distributed.run --nproc_per_node="$NGPU" --no-python \
       nsys profile "${NSYS_FLAGS[@]}" -o "$T/${base}_rank%q{RANK}" python3 ddp.py $a) > "$T/$name.log" 2>&1 || rc=1
    for r in $(seq 0 $((NGPU - 1))); do
      provenance "${base}_rank$r" "$cmd"; cp "$T/$name.log" "$T/${base}_rank$r.log"
    done
  else
    cmd="nsys profile ${NSYS_FLAGS[*]} -o $name python3 -m torch.distributed.run --nproc_per_node=$NGPU workloads/ddp.py $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && timeout "$REC_TIMEOUT" nsys profile "${NSYS_FLAGS[@]}" -o "$T/$name" python3 -m torch.distributed.run \
       --nproc_per_node="$NGPU" ddp.py $a) > "$T/$name.log" 2>&1 || rc=1
    provenance "$name" "$cmd"
  fi
  echo "$name: $(python3 -c "import time;print(round(time.time()-$t0,1))") s rc=$rc"; grep '\[ddp\]' "$T/$name.log"
  rm -f "$T"/*.nsys-rep
done
python3 "$HERE/trim.py" --src "$T" --dest "$T/fixtures"
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
(cd "$T" && tar -cf - ./*.log ./*.json 2>/dev/null | xz -T0 -6 > "$OUT/logs.tar.xz")
ls -la "$OUT"
exit $rc
