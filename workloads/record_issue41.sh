#!/usr/bin/env bash
# Record issue 41's fixtures (memory growth/churn, unified memory thrash/prefetch, blocked/busy input thread,
# unbalanced/balanced 2-stage pipeline, two GPUs taking turns/pipelined, slow iterations) on a machine with
# >= 2 GPUs and nsys on PATH, trim them, then measure nsys's overhead per extra flag.
#
#   OUT=/some/dir bash workloads/record_issue41.sh [names...]
#
# Names: mem_growth mem_churn (--cuda-memory-usage=true), um_thrash um_prefetch (UM GPU+CPU page faults),
# blocked_input busy_input (--cpuctxsw=process-tree), slow_iters (--cpuctxsw=process-tree), pipe_stages
# pipe_balanced (torchrun, 2 ranks in one export), two_gpu_turns two_gpu_pipelined (one process, 2 GPUs).
# Each recording runs under `timeout` (REC_TIMEOUT s, 2x for torchrun), so one hang cannot eat the call; a
# recording is skipped once BUDGET_S seconds have passed. Writes $OUT/fixtures.tar (split into
# fixtures.tar.part-* when over 15 MiB; tests/fixtures/traces/<name>/ folders made by trim.py),
# $OUT/overhead.txt (per-step wall time without nsys, with the base flags and with each extra flag; skipped
# with OVERHEAD=0) and $OUT/logs.tar.xz (the programs' logs and provenance json). No `nsys stats` reports.
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_issue41}
REC_TIMEOUT=${REC_TIMEOUT:-100}
BUDGET_S=${BUDGET_S:-400}
NAMES=${*:-mem_growth mem_churn um_thrash um_prefetch blocked_input busy_input slow_iters pipe_stages pipe_balanced two_gpu_turns two_gpu_pipelined}
mkdir -p "$OUT" "$T"
START=$(date +%s)
# NVLink multicast off (the machine's rule: it can take the host's GPUs out of service)
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
HERE=$(cd "$(dirname "$0")" && pwd)
BASE=(-t cuda,nvtx,osrt -s none --osrt-threshold=10000)
MEM=(--cuda-memory-usage=true)
UM=(--cuda-um-gpu-page-faults=true --cuda-um-cpu-page-faults=true)
GPU=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)
NSYSV=$(nsys --version)
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version())"
spec_of() {  # name -> "<procs> <gpus> <extra nsys flags, comma-joined> <workload> <args>"
  case $1 in
    mem_growth) echo "1 1 --cpuctxsw=none,--cuda-memory-usage=true mem_loop.py --mode growth" ;;
    mem_churn) echo "1 1 --cpuctxsw=none,--cuda-memory-usage=true mem_loop.py --mode churn" ;;
    um_thrash) echo "1 1 --cpuctxsw=none,--cuda-um-gpu-page-faults=true,--cuda-um-cpu-page-faults=true um_loop.py --mode thrash" ;;
    um_prefetch) echo "1 1 --cpuctxsw=none,--cuda-um-gpu-page-faults=true,--cuda-um-cpu-page-faults=true um_loop.py --mode prefetch" ;;
    blocked_input) echo "1 1 --cpuctxsw=process-tree input_wait.py --mode blocked" ;;
    busy_input) echo "1 1 --cpuctxsw=process-tree input_wait.py --mode busy" ;;
    slow_iters) echo "1 1 --cpuctxsw=process-tree slow_iters.py" ;;
    pipe_stages) echo "2 2 --cpuctxsw=none pipe_stages.py" ;;
    pipe_balanced) echo "2 2 --cpuctxsw=none pipe_stages.py --balanced" ;;
    two_gpu_turns) echo "1 2 --cpuctxsw=none two_gpu.py --mode turns" ;;
    two_gpu_pipelined) echo "1 2 --cpuctxsw=none two_gpu.py --mode pipelined" ;;
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
elapsed() { echo $(( $(date +%s) - START )); }
tables() {  # export -> row counts of the tables issue 41 needs
  python3 - "$1" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
have = {r[0] for r in c.execute("select name from sqlite_master where type='table'")}
out = []
for t in ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "NVTX_EVENTS", "SCHED_EVENTS", "COMPOSITE_EVENTS",
          "CUDA_GPU_MEMORY_USAGE_EVENTS", "CUDA_UM_GPU_PAGE_FAULT_EVENTS", "CUDA_UM_CPU_PAGE_FAULT_EVENTS", "OSRT_API"):
    out.append(f"{t.replace('CUPTI_ACTIVITY_KIND_', '')}={c.execute(f'select count(*) from {t}').fetchone()[0] if t in have else '-'}")
print(" ".join(out))
PY
}
record() {  # name [extra flags override]
  local name=$1 spec procs ngpu flags prog a
  spec=$(spec_of "$name") || { echo "unknown recording $name"; return 2; }
  read -r procs ngpu flags prog a <<< "$spec"
  [[ -n $2 ]] && flags=$2
  IFS=, read -r -a fl <<< "$flags"
  local to=$REC_TIMEOUT cvd=0 cmd
  [[ $ngpu -gt 1 ]] && cvd=0,1
  local t0; t0=$(date +%s.%N)
  if [[ $procs -gt 1 ]]; then
    to=$((REC_TIMEOUT * 2))
    cmd="nsys profile ${BASE[*]} ${fl[*]} --export sqlite -f true -o $name python3 -m torch.distributed.run --nproc_per_node=$procs workloads/$prog $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && CUDA_VISIBLE_DEVICES=$cvd timeout -k 15 "$to" nsys profile "${BASE[@]}" "${fl[@]}" --export sqlite -f true \
       -o "$T/$name" python3 -m torch.distributed.run --nproc_per_node="$procs" "$prog" $a) > "$T/$name.log" 2>&1
  else
    cmd="nsys profile ${BASE[*]} ${fl[*]} --export sqlite -f true -o $name python3 workloads/$prog $a"
    # shellcheck disable=SC2086
    (cd "$HERE" && CUDA_VISIBLE_DEVICES=$cvd timeout -k 15 "$to" nsys profile "${BASE[@]}" "${fl[@]}" --export sqlite -f true \
       -o "$T/$name" python3 "$prog" $a) > "$T/$name.log" 2>&1
  fi
  local r=$?
  provenance "$name" "$cmd" "$ngpu"
  echo "== $name: $(python3 -c "import time;print(round(time.time()-$t0,1))") s rc=$r (elapsed $(elapsed) s)"
  grep -E '^\[|Error|error|Traceback' "$T/$name.log" | tail -8
  [[ -f $T/$name.sqlite ]] && echo "   tables: $(tables "$T/$name.sqlite")"
  rm -f "$T"/*.nsys-rep
  return $r
}
rc=0
done_names=()
for name in $NAMES; do
  if (( $(elapsed) > BUDGET_S )); then echo "skipped $name: ${BUDGET_S}s budget spent"; rc=1; continue; fi
  record "$name" || rc=1
  # thread scheduling missing with -s none? record again with sampling on (the nsys default)
  if [[ $name == blocked_input || $name == busy_input ]] && [[ -f $T/$name.sqlite ]] && \
     [[ $(tables "$T/$name.sqlite") == *"SCHED_EVENTS=-"* ]]; then
    echo "   no SCHED_EVENTS with -s none: again with -s process-tree"
    saved=("${BASE[@]}"); BASE=(-t cuda,nvtx,osrt -s process-tree --osrt-threshold=10000)
    record "$name" || rc=1
    BASE=("${saved[@]}")
  fi
  [[ -f $T/$name.sqlite ]] && done_names+=("$name")
done
# trim.py, with these workloads' log tags added to the lines it copies into each README
(cd "$HERE" && python3 -c "
import sys, trim
trim.RESULT_TAGS += ('[mem_loop]', '[um_loop]', '[input_wait]', '[pipe_stages]', '[two_gpu]', '[slow_iters]')
sys.exit(trim.main(sys.argv[1:]))" --src "$T" --dest "$T/fixtures" "${done_names[@]}")
tar -C "$T" -cf "$T/fixtures.tar" fixtures
if (( $(stat -c %s "$T/fixtures.tar") > 15 * 1024 * 1024 )); then
  split -b 15m "$T/fixtures.tar" "$OUT/fixtures.tar.part-"
else
  cp "$T/fixtures.tar" "$OUT/fixtures.tar"
fi
(cd "$T" && tar -cf - ./*.log ./*.json 2>/dev/null | xz -T0 -6 > "$OUT/logs.tar.xz")

# Overhead: per-step wall time (the workload's own p50) without nsys, with the base flags, and with each extra flag.
if [[ ${OVERHEAD:-1} == 1 ]]; then
  O=$OUT/overhead.txt
  p50() { grep -oE 'p50 [0-9.]+ ms' "$1" | head -1 | awk '{print $2}'; }
  ov() {  # label log-name -- command...
    local label=$1 log=$T/ov_$2.log; shift 2
    if (( $(elapsed) > BUDGET_S + 120 )); then echo "$label: skipped (budget)" >> "$O"; return; fi
    local t0 r; t0=$(date +%s)
    (cd "$HERE" && CUDA_VISIBLE_DEVICES=0 timeout -k 10 "$REC_TIMEOUT" "$@") > "$log" 2>&1
    r=$?
    echo "$label: p50 $(p50 "$log") ms (rc $r, $(( $(date +%s) - t0 )) s wall)" | tee -a "$O"
    rm -f "$T"/ov.nsys-rep "$T"/ov.sqlite
  }
  NS=(nsys profile "${BASE[@]}" --cpuctxsw=none -f true -o "$T/ov")
  echo "# per-step p50 (ms), $GPU, $NSYSV; fixtures' own runs: see their logs" > "$O"
  for w in "slow_iters.py" "mem_loop.py --mode growth" "um_loop.py --mode thrash"; do
    n=${w%%.py*}
    # shellcheck disable=SC2086
    ov "$w | no nsys" "${n}_none" python3 $w
    # shellcheck disable=SC2086
    ov "$w | base (-t cuda,nvtx,osrt -s none --cpuctxsw=none)" "${n}_base" "${NS[@]}" python3 $w
    case $n in
      slow_iters)
        ov "$w | base + --cpuctxsw=process-tree" "${n}_ctx" nsys profile "${BASE[@]}" --cpuctxsw=process-tree -f true -o "$T/ov" python3 $w
        ov "$w | base + --cuda-memory-usage=true" "${n}_mem" "${NS[@]}" "${MEM[@]}" python3 $w ;;
      mem_loop)
        # shellcheck disable=SC2086
        ov "$w | base + --cuda-memory-usage=true" "${n}_mem" "${NS[@]}" "${MEM[@]}" python3 $w ;;
      um_loop)
        # shellcheck disable=SC2086
        ov "$w | base + UM GPU+CPU page faults" "${n}_um" "${NS[@]}" "${UM[@]}" python3 $w ;;
    esac
  done
fi
ls -la "$OUT" "$T"
exit $rc
