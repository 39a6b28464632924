#!/usr/bin/env bash
# BERT-base (BertConfig() shape, seeded weights) on one CUDA GPU: every path timed in one process.
# Wheels the machine lacks may lie under .whl/ (but numpy: 1.26 there is for the serving stubs);
# reports go to $OUT when set, else reports/.
# Extra arguments go to `python -m bench` (e.g. --families eager,compile,aoti).
set -uo pipefail
out="${OUT:-reports}"
mkdir -p "$out"
if compgen -G ".whl/*.whl" >/dev/null; then
  rm -rf /tmp/site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $(ls .whl/*.whl | grep -v numpy-) \
    && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
export PYTHONUNBUFFERED=1
source bench/gpu_env.sh
timeout "${BENCH_TIMEOUT_S:-560}" python3 -m bench --model bert-base --device cuda \
  --batches 1,8,32,128 --seqs 128,64,16 --rounds 10 --cell-budget-ms 100 --max-calls 200 \
  --build-budget-s "${BENCH_BUILD_BUDGET_S:-400}" --output-dir "$out" "$@" 2>&1 | tee "$out/bench-cuda.log"
