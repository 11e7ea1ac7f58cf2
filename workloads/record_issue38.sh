#!/usr/bin/env bash
# Record issue 38's fixtures (steps within steps, gap attributions, rank alignment under gradient
# accumulation, a range enclosing later instances of itself) on a machine with >= 2 GPUs and nsys on
# PATH, and trim them.
#
#   OUT=/some/dir bash workloads/record_issue38.sh [names...]
#
# Names: grad_accum grad_accum_straggler grad_accum_straggler15 (one export holding both ranks: nsys runs torchrun, which
# starts one process a GPU), threads_loops serve_loop nested_steps (one process, GPU 0).
# Writes $OUT/fixtures.tar (tests/fixtures/traces/<name>/ folders made by trim.py) and $OUT/logs.tar.xz
# (the programs' logs and provenance json). No `nsys stats` reports.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_issue38}
NGPU=${NGPU:-2}
NAMES=${*:-grad_accum grad_accum_straggler grad_accum_straggler15 threads_loops serve_loop nested_steps}
mkdir -p "$OUT" "$T"
# NVLink multicast off (the machine's rule: it can take the host's GPUs out of service)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HERE=$(cd "$(dirname "$0")" && pwd)
NSYS_FLAGS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --osrt-threshold=10000 --export sqlite -f true)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
args_of() {  # name -> "<ngpu> <workload> <args>"
  case $1 in
    grad_accum) echo "$NGPU grad_accum.py" ;;
    grad_accum_straggler) echo "$NGPU grad_accum.py --slow-rank 1 --slow-ms 6" ;;
    grad_accum_straggler15) echo "$NGPU grad_accum.py --slow-rank 1 --slow-ms 15" ;;
    threads_loops) echo "1 threads_loops.py" ;;
    serve_loop) echo "1 serve_loop.py" ;;
    nested_steps) echo "1 nested_steps.py" ;;
    *) return 1 ;;
  esac
}
provenance() {  # name command ngpu
  python3 - "$1" "$2" "$GPU" "$NSYSV" "$3" > "$T/$1.json" <<'PY'
import json, sys
name, cmd, gpu, nsysv, ngpu = sys.argv[1:]
g = [s.strip() for s in gpu.split(",")]
print(json.dumps({"name": name, "command": cmd, "gpu": g[0] if ngpu == "1" else f"{ngpu}x {g[0]}", "driver": g[1],
                  "gpu_memory": g[2], "nsys_version": nsysv}))
PY
}
rc=0
for name in $NAMES; do
  spec=$(args_of "$name") || { echo "unknown recording $name"; rc=2; continue; }
  read -r n prog a <<< "$spec"
  t0=$(date +%s.%N)
  if [[ $n -gt 1 ]]; then
    cmd="nsys profile ${NSYS_FLAGS[*]} -o $name python3 -m torch.distributed.run --nproc_per_node=$n workloads/$prog $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && nsys profile "${NSYS_FLAGS[@]}" -o "$T/$name" python3 -m torch.distributed.run \
       --nproc_per_node="$n" "$prog" $a) > "$T/$name.log" 2>&1 || rc=1
  else
    cmd="nsys profile ${NSYS_FLAGS[*]} -o $name python3 workloads/$prog $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && CUDA_VISIBLE_DEVICES=0 nsys profile "${NSYS_FLAGS[@]}" -o "$T/$name" python3 "$prog" $a) \
       > "$T/$name.log" 2>&1 || rc=1
  fi
  provenance "$name" "$cmd" "$n"
  echo "$name: $(python3 -c "import time;print(round(time.time()-$t0,1))") s rc=$rc"
  grep -E '^\[|Error|error' "$T/$name.log" | tail -8
  rm -f "$T"/*.nsys-rep
done
# trim.py, with these workloads' log tags added to the lines it copies into each README
(cd "$HERE" && python3 -c "
import sys, trim
trim.RESULT_TAGS += ('[grad_accum]', '[threads_loops]', '[serve_loop]', '[nested_steps]')
sys.exit(trim.main(sys.argv[1:]))" --src "$T" --dest "$T/fixtures")
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
(cd "$T" && tar -cf - ./*.log ./*.json 2>/dev/null | xz -T0 -6 > "$OUT/logs.tar.xz")
ls -la "$OUT" "$T"
exit $rc
