#!/bin/sh
# The peer side of the side-by-side benchmark: what `nsys stats` (kernel, API, memcpy time/size, NVTX
# summaries) plus `nsys analyze` (its default rules) cost on one export, with Debian's Nsight Systems
# 2022.4 (../shared/tools/install-nsys2022.sh). Runs on a copy, so the trace is never touched.
#   benchmarks/peer_nsys2022.sh TRACE.sqlite            # then compare with:
#   nsysan analyze TRACE.sqlite --json /tmp/n.json --html /tmp/n.html --force --quiet
set -eu
NSYS=${NSYS:-nsys2022}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$1" "$tmp/t.sqlite"
"$NSYS" stats -q -r gpukernsum,cudaapisum,gpumemtimesum,gpumemsizesum,nvtxsum -f csv -o "$tmp/r" "$tmp/t.sqlite" >/dev/null
"$NSYS" analyze -q "$tmp/t.sqlite" >/dev/null 2>&1 || "$NSYS" analyze "$tmp/t.sqlite" >/dev/null
