#!/usr/bin/env bash
# Record the "why the GPU waits" fixtures (workloads/waits.py) on a GPU machine with nsys on PATH.
#
#   OUT=/some/dir bash workloads/record_waits.sh
#
# waits_python: CPU + Python sampling, CUDA + Python backtraces, exported with blobs (Python frames)
#   and waits_python_noblobs: the same report exported without them (what `nsys profile --export` gives);
# waits_phases: GPU metrics (device 0, 10 kHz) over memory-bound, tensor-bound and launch-bound phases.
T_DEFAULT=/tmp/rec_waits
. "$(dirname "$0")/record_common.sh"
rc=0
PYFLAGS=(-t cuda,nvtx,osrt -s process-tree --python-sampling=true --python-sampling-frequency=2000
         --cudabacktrace=all --python-backtrace=cuda --cpuctxsw=none -f true)
(cd "$HERE" && nsys profile "${PYFLAGS[@]}" -o "$T/waits_python" python3 waits.py --mode python) > "$T/waits_python.log" 2>&1 || rc=1
nsys export --type sqlite --include-blobs=true -f true -o "$T/waits_python.sqlite" "$T/waits_python.nsys-rep" >> "$T/waits_python.log" 2>&1 || rc=1
nsys export --type sqlite -f true -o "$T/waits_python_noblobs.sqlite" "$T/waits_python.nsys-rep" >> "$T/waits_python.log" 2>&1 || rc=1
cp "$T/waits_python.log" "$T/waits_python_noblobs.log"
prov waits_python "nsys profile ${PYFLAGS[*]} -o waits_python python3 workloads/waits.py --mode python; nsys export --type sqlite --include-blobs=true -o waits_python.sqlite waits_python.nsys-rep"
prov waits_python_noblobs "the same report: nsys export --type sqlite -o waits_python_noblobs.sqlite waits_python.nsys-rep (no --include-blobs)"
MFLAGS=(-t cuda,nvtx -s none --cpuctxsw=none --gpu-metrics-devices=0 --gpu-metrics-frequency=10000 --export sqlite -f true)
(cd "$HERE" && nsys profile "${MFLAGS[@]}" -o "$T/waits_phases" python3 waits.py --mode phases) > "$T/waits_phases.log" 2>&1 || rc=1
prov waits_phases "nsys profile ${MFLAGS[*]} -o waits_phases python3 workloads/waits.py --mode phases"
rm -f "$T"/*.nsys-rep
ls -la "$T"
grep -h '\[waits\]' "$T"/*.log
python3 "$HERE/trim.py" --keep-callchains --src "$T" --dest "$T/fixtures"
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
exit $rc
