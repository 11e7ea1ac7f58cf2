#!/usr/bin/env bash
# Record the distributed-training fixtures on a machine with >= 2 GPUs and nsys on PATH, and trim them.
#
#   OUT=/some/dir bash workloads/record_ddp.sh [names...]
#
# Names: ddp_overlap ddp_serial ddp_straggler tp fsdp pipeline (one export holding every rank: nsys
# runs torchrun, which starts one process a GPU) and ddp_overlap_ranks ddp_straggler_ranks (one export
# per rank: torchrun runs one nsys a rank, -o <name>_rank%q{RANK}).
# Writes $OUT/fixtures.tar (tests/fixtures/traces/<name>/ folders made by trim.py) and $OUT/logs.tar.xz.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_ddp}
NGPU=${NGPU:-2}
NAMES=${*:-ddp_overlap ddp_serial ddp_straggler ddp_overlap_ranks ddp_straggler_ranks}
mkdir -p "$OUT" "$T"
# NVLink multicast off (the machine's rule: it can take the host's GPUs out of service)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HERE=$(cd "$(dirname "$0")" && pwd)
NSYS_FLAGS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite -f true)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
args_of() {
  case $1 in
    ddp_overlap|ddp_overlap_ranks) echo "--mode ddp" ;;
    ddp_serial) echo "--mode serial" ;;
    ddp_straggler|ddp_straggler_ranks) echo "--mode ddp --slow-rank 1 --slow-ms 8" ;;
    tp) echo "--mode tp" ;;
    fsdp) echo "--mode fsdp" ;;
    pipeline) echo "--mode pipeline" ;;
    *) return 1 ;;
  esac
}
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
  t0=$(date +%s.%N)
  if [[ $name == *_ranks ]]; then
    base=${name%_ranks}
    cmd="torchrun --nproc_per_node=$NGPU --no-python nsys profile ${NSYS_FLAGS[*]} -o ${base}_rank%q{RANK} python3 workloads/ddp.py $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && python3 -m torch.distributed.run --nproc_per_node="$NGPU" --no-python \
       nsys profile "${NSYS_FLAGS[@]}" -o "$T/${base}_rank%q{RANK}" python3 ddp.py $a) > "$T/$name.log" 2>&1 || rc=1
    for r in $(seq 0 $((NGPU - 1))); do
      provenance "${base}_rank$r" "$cmd"; cp "$T/$name.log" "$T/${base}_rank$r.log"
    done
  else
    cmd="nsys profile ${NSYS_FLAGS[*]} -o $name python3 -m torch.distributed.run --nproc_per_node=$NGPU workloads/ddp.py $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && nsys profile "${NSYS_FLAGS[@]}" -o "$T/$name" python3 -m torch.distributed.run \
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
