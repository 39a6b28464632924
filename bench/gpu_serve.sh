#!/usr/bin/env bash
# Triton on one CUDA GPU, in one run: export BERT-base (BertConfig() shape, seeded) in fp16 with AOTInductor,
# start the bundled tritonserver on it, and run `python -m bench.served` (concurrency 1 and a perf_analyzer sweep).
#
# What it carries and the venv it builds: bench/gpu_venv.sh.
# Knobs (env): SKIP (artifact paths not built, default onnx,torchscript), INSTANCES, QUEUE_DELAY_US (the dynamic
# batcher's max queue delay), CASES and CONCURRENCY (bench.served's), EXPORT_ARGS (more `python -m export`
# arguments, e.g. --no-gelu-epilogue), EXPORT_TIMEOUT_S, SERVED_TIMEOUT_S, ENCODER_BACKEND (python until this
# script builds the native backend against the machine's CUDA torch; native then).
source bench/gpu_venv.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$py" -c 'import numpy, torch; print("numpy", numpy.__version__, "torch", torch.__version__)' | tee -a "$out/gpu.txt"

start=$(date +%s)
PYTHONPATH=/tmp/export-site timeout "${EXPORT_TIMEOUT_S:-330}" python3 -m export --execution-env "$venv" \
  --model bert-base --target cuda --precision fp16 --max-batch 128 --max-seq 128 --instances "${INSTANCES:-1}" \
  --max-queue-delay-us "${QUEUE_DELAY_US:-500}" --encoder-backend "${ENCODER_BACKEND:-python}" --skip "${SKIP:-onnx,torchscript}" --output build/gpu-repository ${EXPORT_ARGS:-} \
  2>&1 | tee "$out/export.log" | tail -25
echo "export: $(($(date +%s) - start)) s" | tee -a "$out/gpu.txt"
[ -f build/gpu-repository/repository.json ] || exit 1

timeout "${SERVED_TIMEOUT_S:-240}" "$py" -m bench.served --repository build/gpu-repository \
  --cases "${CASES:-bert-128,embed-corpus}" --concurrency "${CONCURRENCY:-1,8,32,64,128,256}" \
  --duration-s 8 --window-ms 3000 --label cuda --output-dir "$out" 2>&1 | tail -40
tail -c 20000 "$out/served-cuda-work/server.log" >"$out/server-tail.log" 2>/dev/null
rm -rf "$out/served-cuda-work"
