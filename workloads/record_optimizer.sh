#!/usr/bin/env bash
# Record the per-parameter optimizer fixtures (workloads/optimizer_loop.py, issue 49 item 2) on a GPU
# machine with nsys on PATH, and the measured re-run of both optimizers without the profiler.
#
#   OUT=/some/dir bash workloads/record_optimizer.sh
#
# optim_foreach_false: Adam(foreach=False) over 200 small parameters; optim_fused: Adam(fused=True).
# Only the steady steps are captured (--capture-range=cudaProfilerApi: the workload starts the
# profiler after its warm-up); exported to SQLite, trimmed with workloads/trim.py; then
# optimizer_loop.py --measure 3 (alternating pairs, per-step time, no profiler) into measure.log.
T_DEFAULT=/tmp/rec_optim
. "$(dirname "$0")/record_common.sh"
rc=0
FLAGS=(-t cuda,nvtx,osrt -s none --cpuctxsw=none --capture-range=cudaProfilerApi --capture-range-end=stop -f true)
for mode in foreach_false fused; do
  n=optim_$mode
  (cd "$HERE" && nsys profile "${FLAGS[@]}" -o "$T/$n" python3 optimizer_loop.py --optimizer $mode) > "$T/$n.log" 2>&1 || rc=1
  nsys export --type sqlite -f true -o "$T/$n.sqlite" "$T/$n.nsys-rep" >> "$T/$n.log" 2>&1 || rc=1
  prov $n "nsys profile ${FLAGS[*]} -o $n python3 workloads/optimizer_loop.py --optimizer $mode; nsys export --type sqlite -o $n.sqlite $n.nsys-rep"
done
rm -f "$T"/*.nsys-rep
(cd "$HERE" && python3 optimizer_loop.py --measure 3 --steps 30) > "$T/measure.log" 2>&1 || rc=1
ls -la "$T"
grep -h '\[optimizer_loop\]' "$T"/*.log
python3 "$HERE/trim.py" --src "$T" --dest "$T/fixtures" optim_foreach_false optim_fused
cp "$T"/*.log "$T"/*.json "$T/fixtures/" 2>/dev/null
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
ls -la "$OUT"
exit $rc
