#!/usr/bin/env bash
# One GPU check of the embedding, the bank builder and pre-training (device tool, H200).
# Needs the pure-Python wheels of shared/GPU_NOTES.md in .whl/ (carried); writes to $OUT.
#   run: bash benchmarks/gpu_check.sh   (carry [".whl"], timeout ~480 s)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || exit 1
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
step() {  # name, command...: time it, keep its output, never stop the script
    local name=$1
    shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    echo "$name rc=$? ${SECONDS}-${t0}s" | tee -a "$OUT/steps.txt"
    tail -c 3000 "$OUT/$name.out"
    tail -n 5 "$OUT/$name.err"
}
step embedding python3 benchmarks/embedding.py --device cuda --parity --bank-clients 20000
step pretrain /usr/bin/time -v python3 pretrain_vae.py --dataset mnist-5k --device cuda \
    --output /tmp/gpu/gmm.pt --cache-dir /tmp/gpu/cache --no-progress
cp /tmp/gpu/gmm.json "$OUT/pretrain_report.json" 2>/dev/null
# Batch vs routing at the default samples seen, and fewer samples (CPU candidates).
step sweep python3 benchmarks/pretrain_sweep.py --device cuda --cache-dir /tmp/gpu/cache \
    --batch 64 --batch 128 --batch 512
step sweep_less python3 benchmarks/pretrain_sweep.py --device cuda --cache-dir /tmp/gpu/cache \
    --samples 0.5 --batch 128 --batch 256
step models python3 benchmarks/models_learning.py --device cuda --train 1000 --epochs 4
exit 0
