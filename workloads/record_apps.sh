#!/usr/bin/env bash
# Record the application-style fixtures (LLM decode eager/graph, HF generate, training input
# pipelines, two NCCL processes on one GPU) on a GPU machine with nsys on PATH, and trim them.
#
#   OUT=/some/dir bash workloads/record_apps.sh [names...]
#
# Writes $OUT/fixtures.tar (tests/fixtures/traces/<name>/ folders made by trim.py) and
# $OUT/raw.tar.xz (the untrimmed exports, logs, provenance json, nsys stats csv).
set -o pipefail
OUT=${OUT:-out}
T=${REC_DIR:-/tmp/rec_apps}
NAMES=${*:-decode_eager decode_graph decode_graph_nodes hf_generate train_inline train_dataloader two_procs jax_train compile_train}
mkdir -p "$OUT" "$T"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import torch, transformers, numpy; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'nccl', torch.cuda.nccl.version(), 'transformers', transformers.__version__, 'numpy', numpy.__version__)"
nproc
# shellcheck disable=SC2086
python3 workloads/record.py --out "$T" --timeout 150 $NAMES
rc=$?
python3 workloads/trim.py --src "$T" --dest "$T/fixtures"
tar -C "$T" -cf "$OUT/fixtures.tar" fixtures
(cd "$T" && tar -cf - ./*.sqlite ./*.log ./*.json ./*.stats 2>/dev/null | xz -T0 -6 > "$OUT/raw.tar.xz")
ls -la "$OUT"
exit $rc
