#!/usr/bin/env bash
# Record the run-ahead leak fixtures (workloads/mem_loop.py --mode ahead / cupy, issue 49 item 3) on a GPU
# machine with nsys on PATH, then the measured re-run of each loop without the profiler until the device
# is out of memory (the measured out-of-memory horizon).
#
#   OUT=/some/dir bash workloads/record_mem_leak.sh
#
# mem_leak_ahead: PyTorch, 128 MiB kept per step in a list, no synchronization per step (the CPU far
# ahead of the GPU); mem_leak_cupy: CuPy, a cache keyed by step keeping 64 MiB per step, no
# synchronization either. Both with --cuda-memory-usage=true, trimmed with workloads/trim.py; the
# re-runs (--until-oom) write measure_<name>.log. Writes $OUT/fixtures.tar.
T_DEFAULT=/tmp/rec_mem_leak
. "$(dirname "$0")/record_common.sh"
rc=0
FLAGS=(-t cuda,nvtx,osrt -s none --osrt-threshold=10000 --cpuctxsw=none --cuda-memory-usage=true --export sqlite -f true)
declare -A ARGS=([mem_leak_ahead]="--mode ahead --steps 40" [mem_leak_cupy]="--mode cupy --steps 40 --keep-mib 64 --heavy 2")
for n in mem_leak_ahead mem_leak_cupy; do
  # shellcheck disable=SC2086
  (cd "$HERE" && CUDA_VISIBLE_DEVICES=0 timeout -k 10 120 nsys profile "${FLAGS[@]}" -o "$T/$n" python3 mem_loop.py ${ARGS[$n]}) \
    > "$T/$n.log" 2>&1 || rc=1
  prov $n "nsys profile ${FLAGS[*]} -o $n python3 workloads/mem_loop.py ${ARGS[$n]}"
  # shellcheck disable=SC2086
  (cd "$HERE" && CUDA_VISIBLE_DEVICES=0 timeout -k 10 120 python3 mem_loop.py ${ARGS[$n]} --until-oom) \
    > "$T/measure_$n.log" 2>&1 || rc=1
done
rm -f "$T"/*.nsys-rep
ls -la "$T"
grep -h '\[mem_loop\]\|Error' "$T"/*.log
(cd "$HERE" && python3 -c "
import sys, trim
trim.RESULT_TAGS += ('[mem_loop]',)
sys.exit(trim.main(sys.argv[1:]))" --src "$T" --dest "$T/fixtures" mem_leak_ahead mem_leak_cupy) || rc=1
cp "$T"/*.log "$T"/*.json "$T/fixtures/" 2>/dev/null
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
ls -la "$OUT"
exit $rc
