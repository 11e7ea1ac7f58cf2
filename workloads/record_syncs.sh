#!/usr/bin/env bash
# Record the hidden-synchronization fixtures (workloads/hidden_syncs.py, issue 49 item 1) on a GPU
# machine with nsys on PATH, and the measured re-run of both loops without the profiler.
#
#   OUT=/some/dir bash workloads/record_syncs.sh
#
# syncs_mask: boolean-mask loss + loss.item() every step; syncs_none: masked arithmetic, loss read
# every 50 steps. Both with CPU + Python sampling, CUDA + Python backtraces, exported with blobs
# (Python frames live in them), trimmed with workloads/trim.py --keep-callchains; then
# hidden_syncs.py --measure 3 (alternating pairs, per-step time, no profiler) into measure.log.
T_DEFAULT=/tmp/rec_syncs
. "$(dirname "$0")/record_common.sh"
rc=0
PYFLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=true --python-sampling-frequency=2000
         --cudabacktrace=all --python-backtrace=cuda --cpuctxsw=none -f true)
for mode in mask none; do
  n=syncs_$mode
  (cd "$HERE" && nsys profile "${PYFLAGS[@]}" -o "$T/$n" python3 hidden_syncs.py --mode $mode) > "$T/$n.log" 2>&1 || rc=1
  nsys export --type sqlite --include-blobs=true -f true -o "$T/$n.sqlite" "$T/$n.nsys-rep" >> "$T/$n.log" 2>&1 || rc=1
  prov $n "nsys profile ${PYFLAGS[*]} -o $n python3 workloads/hidden_syncs.py --mode $mode; nsys export --type sqlite --include-blobs=true -o $n.sqlite $n.nsys-rep"
done
rm -f "$T"/*.nsys-rep
(cd "$HERE" && python3 hidden_syncs.py --measure 3 --steps 300) > "$T/measure.log" 2>&1 || rc=1
ls -la "$T"
grep -h '\[hidden_syncs\]' "$T"/*.log
python3 "$HERE/trim.py" --keep-callchains --src "$T" --dest "$T/fixtures" syncs_mask syncs_none
cp "$T"/*.log "$T"/*.json "$T/fixtures/" 2>/dev/null
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
ls -la "$OUT"
exit $rc
