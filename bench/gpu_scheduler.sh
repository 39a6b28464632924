#!/usr/bin/env bash
# The scheduler against the backend before it, on one CUDA GPU, same machine, same call (the issue's table):
#   bash bench/gpu_scheduler.sh prepare compare
# prepare: bench/gpu_native.sh's (venv, this backend built against the machine's CUDA torch, BERT-base fp16
# exported), then the earlier backend from .gpu/baseline-backend.tar (`git archive <commit> backend`) beside it.
# compare: per backend, bench.served over gRPC (the corpus, 1 and 32 texts a request; bert 128 tokens), then
# HTTP with JSON outputs (bench.http_json) and GPU utilisation sampled during 32-text gRPC load.
source bench/gpu_venv.sh
repo=build/gpu-repository

prepare() {
  bash bench/gpu_native.sh prepare || return 1
  rm -rf /tmp/baseline-src && mkdir -p /tmp/baseline-src && tar -xf .gpu/baseline-backend.tar -C /tmp/baseline-src
  local torch_dir ssl=()
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  [ -f /usr/include/openssl/sha.h ] || ssl=(-DOPENSSL_INCLUDE_DIR=/tmp/openssl/include
    "-DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so* | sort | head -1)")
  { cmake -S /tmp/baseline-src/backend -B build/backend-baseline -DTORCH_DIR="$torch_dir" -DBERTSERVE_WERROR=OFF \
    -DJSON_INCLUDE=/tmp/export-site/nlohmann_json/include "${ssl[@]}" && cmake --build build/backend-baseline -j 16; } \
    >"$out/baseline-build.log" 2>&1 || { tail -30 "$out/baseline-build.log"; return 1; }
  echo "baseline backend built"
}

one() {  # $1: label, $2: library
  rm -rf /tmp/bertserve-backends-*
  export BERTSERVE_BACKEND_LIBRARY="$PWD/$2"
  timeout "${SERVED_TIMEOUT_S:-200}" "$py" -m bench.served --repository "$repo" \
    --cases embed-corpus,embed-corpus-b32,bert-128 --concurrency "${CONCURRENCY:-1,16,32,64,256}" --duration-s 3 \
    --window-ms 1500 --label "sched-$1" --output-dir "$out" 2>&1 | grep -v ' INFO ' | tail -40
  timeout 120 "$py" - "$repo" "$1" <<'PY' 2>&1 | grep -v ' INFO '
import json, subprocess, sys, threading, time
from pathlib import Path
from bench import http_json
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_perf_analyzer
from reliability import processes

repo, label = Path(sys.argv[1]).resolve(), sys.argv[2]
with processes.running(repo, Path(f"/tmp/busy-{label}.log")) as server:
    for texts, conc in ((32, 1), (1, 1), (1, 16), (1, 64)):
        print(label, "http-json", json.dumps(http_json.run(server.http_url, "embed", texts, conc, 4.0, 8)), flush=True)
    binary, libdir = ensure_perf_analyzer(Path("build"))
    data = Path(f"/tmp/busy-{label}.json")
    data.write_text(json.dumps(perf_analyzer_input_data(build_pool(LoadTestConfig(payload="corpus"), "text"))))
    for conc in (4, 16):
        samples, stop = [], threading.Event()
        def sample():
            while not stop.is_set():
                q = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                                   capture_output=True, text=True)
                samples.append(float(q.stdout.strip() or 0))
                time.sleep(0.1)
        t = threading.Thread(target=sample)
        t.start()
        try:
            r = run_perf_analyzer(binary, libdir, server.grpc_url, "embed", conc, data, Path(f"/tmp/busy-{label}.csv"),
                                  2000, 50.0, max_trials=3, batch=32)
        except RuntimeError as e:
            r = {"error": str(e)[-300:]}
        stop.set(); t.join()
        busy = sum(samples[len(samples) // 4:]) / max(1, len(samples) - len(samples) // 4)
        print(label, "busy", json.dumps({"concurrency": conc, "texts_per_request": 32, **r,
                                         "gpu_util_pct": round(busy, 1)}), flush=True)
PY
}

deadline() {  # $1: the native models' deadline_us in the exported configs
  sed -i -E "/key: \"deadline_us\"/{n;n;s/string_value: \"[0-9]+\"/string_value: \"$1\"/}" "$repo"/{embed,bert}/config.pbtxt
  grep -A1 deadline_us "$repo/embed/config.pbtxt" | tail -1
}

compare() {
  one baseline build/backend-baseline/libtriton_bertserve.so
  deadline 10000 && one scheduler build/backend/libtriton_bertserve.so
  deadline 25000 && one scheduler-25ms build/backend/libtriton_bertserve.so
  grep -h "costs measured\|buckets captured" /tmp/busy-*.log | tail -4
}

for stage in "$@"; do
  echo "== $stage $(date +%T)"
  "$stage" || { echo "$stage failed"; exit 1; }
done
