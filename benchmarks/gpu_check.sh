#!/usr/bin/env bash
# One GPU check of the embedding (one client, bank builder, CPU/CUDA parity) and pre-training.
# Needs the pure-Python wheels of shared/GPU_NOTES.md in .whl/ (carried); writes to $OUT.
#   run: bash benchmarks/gpu_check.sh   (carry [".whl"], timeout ~400 s)
# Extra steps: GPU_CHECK_MODELS=1 (models_learning.py), GPU_CHECK_SWEEP=1 (batch sweep).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
site=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$site" .whl/*.whl || exit 1
export PYTHONPATH=$site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
lscpu | grep -E "Model name|^CPU\(s\)" | tee -a "$OUT/gpu.txt"
step() {  # name, command...: time it, keep its output, never stop the script
    local name=$1
    shift
    local t0=$SECONDS
    "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
    echo "$name rc=$? ${SECONDS}-${t0}s" | tee -a "$OUT/steps.txt"
    tail -c 3000 "$OUT/$name.out"
    tail -n 5 "$OUT/$name.err"
}
step one_client python3 benchmarks/one_client.py --device cuda
# kymatio.torch itself does not import with scipy 1.18 (sph_harm is gone): skip the reference tests.
step tests_embedding python3 -m pytest -q -p no:cacheprovider tests/router/test_embedding.py -k "not kymatio"
step embedding python3 benchmarks/embedding.py --device cuda --parity --bank-clients 20000
step pretrain /usr/bin/time -v python3 pretrain_vae.py --dataset mnist-5k --device cuda \
    --output /tmp/gpu/gmm.pt --cache-dir /tmp/gpu/cache --no-progress
cp /tmp/gpu/gmm.json "$OUT/pretrain_report.json" 2>/dev/null
if [ "${GPU_CHECK_SWEEP:-0}" = 1 ]; then
    step sweep python3 benchmarks/pretrain_sweep.py --device cuda --cache-dir /tmp/gpu/cache \
        --batch 64 --batch 128 --batch 512
fi
if [ "${GPU_CHECK_MODELS:-0}" = 1 ]; then
    step models python3 benchmarks/models_learning.py --device cuda --train 1000 --epochs 4
fi
exit 0
