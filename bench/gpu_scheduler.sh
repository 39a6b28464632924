#!/usr/bin/env bash
# The scheduler against earlier backends, on one CUDA GPU, same machine, same call (the issue's table):
#   bash bench/gpu_scheduler.sh prepare compare
# prepare: bench/gpu_native.sh's (venv, this backend built against the machine's CUDA torch, BERT-base fp16
# exported), then each earlier backend .gpu/<name>-backend.tar (`git archive <commit> backend`) built beside it
# into build/backend-<name>.
# compare: per variant, bench.served over gRPC (the corpus, 1 and 32 texts a request; bert 128 tokens), HTTP with
# JSON outputs (bench.http_json: KServe, the gateway's OpenAI route, and the same through OpenAI's SDK), GPU
# utilisation sampled during 32-text gRPC load, and the server's busiest threads under one-text load.
# clients: one text a request from K perf_analyzer processes at once (each its own gRPC connection) against one
# process at K times the concurrency (CLIENTS, KxC pairs): whether one client connection bounds the server.
# VARIANTS: label:library:instances:deadline_us[:settings], space-separated; settings: NAME=VALUE pairs joined by
# '+' exported for that variant (CASES; HTTP=0 to run bench.served alone; the launcher's BERTSERVE_SERVE_*).
# cpu: the CPU scheduler on two of the host's cores (taskset): BERT-base's shape fp32 (seeded: the bundle carries no
# MiniLM weights) exported for the CPU, then per default deadline (DEADLINES, microseconds) `python -m reliability
# overload` and a one-minute soak at 70 % of capacity.
source bench/gpu_venv.sh
repo=build/gpu-repository
CASES="${CASES:-embed-corpus@1/16/64/128/256,embed-corpus-b32@1/4/8/16/32,bert-128@64/256}"
VARIANTS="${VARIANTS:-scheduler:build/backend/libtriton_bertserve.so:1:10000 scheduler-2:build/backend/libtriton_bertserve.so:2:10000}"

prepare() {
  bash bench/gpu_native.sh prepare || return 1
  local torch_dir ssl=() tar name
  torch_dir="$(python3 -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  [ -f /usr/include/openssl/sha.h ] || ssl=(-DOPENSSL_INCLUDE_DIR=/tmp/openssl/include
    "-DOPENSSL_CRYPTO_LIBRARY=$(ls /usr/lib/x86_64-linux-gnu/libcrypto.so* | sort | head -1)")
  for tar in .gpu/*-backend.tar; do
    [ -f "$tar" ] || continue # no earlier backend carried: this one alone
    name="$(basename "$tar" -backend.tar)"
    rm -rf "/tmp/$name-src" && mkdir -p "/tmp/$name-src" && tar -xf "$tar" -C "/tmp/$name-src"
    { cmake -S "/tmp/$name-src/backend" -B "build/backend-$name" -DTORCH_DIR="$torch_dir" -DBERTSERVE_WERROR=OFF \
      -DJSON_INCLUDE=/tmp/export-site/nlohmann_json/include "${ssl[@]}" && cmake --build "build/backend-$name" -j 16; } \
      >"$out/$name-build.log" 2>&1 || { tail -30 "$out/$name-build.log"; return 1; }
    echo "$name backend built"
  done
}

configure() {  # $1: instances per model, $2: deadline_us, in the exported configs of embed and bert
  sed -i -E "s/count: [0-9]+/count: $1/" "$repo"/{embed,bert}/config.pbtxt
  sed -i -E "/key: \"deadline_us\"/{n;n;s/string_value: \"[0-9]+\"/string_value: \"$2\"/}" "$repo"/{embed,bert}/config.pbtxt
  # Recorded in the manifests, or the launcher would refuse to load the edited models.
  "$py" -c 'import sys; from pathlib import Path; from reliability.copies import record_config
for d in sys.argv[1:]: record_config(Path(d))' "$repo"/{embed,bert} || return 1
  echo "instances $(grep -o 'count: [0-9]*' "$repo/embed/config.pbtxt"), deadline_us" \
    "$(grep -A2 deadline_us "$repo/embed/config.pbtxt" | grep -o '[0-9]\+' | tail -1)"
}

one() {  # $1: label, $2: library
  rm -rf /tmp/bertserve-backends-*
  export BERTSERVE_BACKEND_LIBRARY="$PWD/$2"
  timeout "${SERVED_TIMEOUT_S:-200}" "$py" -m bench.served --repository "$repo" --cases "$CASES" --duration-s 3 \
    --window-ms 1500 --label "sched-$1" --output-dir "$out" 2>&1 | grep -v ' INFO ' | tail -60
  [ "${HTTP:-1}" = 1 ] || return 0
  timeout 150 "$py" - "$repo" "$1" <<'PY' 2>&1 | grep -v ' INFO '
import json, subprocess, sys, threading, time
from pathlib import Path
from bench import http_json
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_perf_analyzer
from reliability import processes

repo, label = Path(sys.argv[1]).resolve(), sys.argv[2]
with processes.running(repo, Path(f"/tmp/busy-{label}.log")) as server:
    for texts, conc in ((32, 1), (1, 1), (1, 64)):
        print(label, "http-json", json.dumps(http_json.run(server.http_url, "embed", texts, conc, 4.0, 8)), flush=True)
    if server.gateway_url:
        for route, texts, conc in (("openai", 32, 1), ("openai", 1, 64), ("openai-sdk", 32, 1), ("openai-sdk", 1, 64)):
            try:
                r = http_json.run(server.gateway_url, "embed", texts, conc, 4.0, 8, route=route)
            except Exception as e:  # noqa: BLE001 - e.g. no gateway on this machine: the rest still runs
                r = {"error": repr(e)[-300:]}
            print(label, route, json.dumps(r), flush=True)
    binary, libdir = ensure_perf_analyzer(Path("build"))
    data = Path(f"/tmp/busy-{label}.json")
    data.write_text(json.dumps(perf_analyzer_input_data(build_pool(LoadTestConfig(payload="corpus"), "text"))))

    def load(conc, batch):
        try:
            return run_perf_analyzer(binary, libdir, server.grpc_url, "embed", conc, data,
                                     Path(f"/tmp/busy-{label}.csv"), 2000, 50.0, max_trials=3, batch=batch)
        except RuntimeError as e:
            return {"error": str(e)[-300:]}

    samples, stop = [], threading.Event()
    def sample():
        while not stop.is_set():
            q = subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                               capture_output=True, text=True)
            samples.append(float(q.stdout.strip() or 0))
            time.sleep(0.1)
    t = threading.Thread(target=sample)
    t.start()
    r = load(8, 32)
    stop.set(); t.join()
    busy = sum(samples[len(samples) // 4:]) / max(1, len(samples) - len(samples) // 4)
    print(label, "busy", json.dumps({"concurrency": 8, "texts_per_request": 32, **r, "gpu_util_pct": round(busy, 1)}))
    # The server's busiest threads under one-text load: where the host time goes.
    pid = subprocess.run(["pgrep", "-n", "tritonserver"], capture_output=True, text=True).stdout.strip()
    top = subprocess.Popen(["top", "-H", "-b", "-n", "2", "-d", "3", "-p", pid], stdout=subprocess.PIPE, text=True)
    def jiffies():  # the host's busy and total CPU time (/proc/stat): is the host saturated, client included?
        cpu = [int(x) for x in open("/proc/stat").readline().split()[1:]]
        return sum(cpu) - cpu[3] - cpu[4], sum(cpu)

    before = jiffies()
    r = load(256, 1)
    after = jiffies()
    host_busy = round(100 * (after[0] - before[0]) / max(1, after[1] - before[1]), 1)
    listing = top.communicate()[0].split("\n\n")[-1].splitlines()
    print(label, "threads", json.dumps({"concurrency": 256, **r, "host_cpu_busy_pct": host_busy}), flush=True)
    print("\n".join(listing[:18]))
PY
}

cpu() {
  local repo=build/cpu-repository d
  if [ ! -f "$repo/repository.json" ]; then
    PYTHONPATH=/tmp/export-site timeout 400 python3 -m export --execution-env "$venv" --target cpu --model bert-base \
      --max-seq 128 --precision fp32 --no-autotune --skip onnx,torchscript --output "$repo" >"$out/cpu-export.log" 2>&1 \
      || { tail -20 "$out/cpu-export.log"; return 1; }
  fi
  for d in ${DEADLINES:-1000000 100000}; do
    rm -rf /tmp/bertserve-backends-*
    taskset -c 0,1 timeout 200 "$py" -m reliability overload --repository "$repo" --deadline-us "$d" \
      --out "$out/overload-$d.json" 2>&1 | grep -v ' INFO ' | tail -40
    taskset -c 0,1 timeout 200 "$py" -m reliability soak --repository "$repo" --deadline-us "$d" --minutes 1 \
      --window-s 30 --warmup-s 0 --out "$out/soak-$d.json" 2>&1 | grep -v ' INFO ' | tail -25
  done
}

clients() {
  rm -rf /tmp/bertserve-backends-*
  export BERTSERVE_BACKEND_LIBRARY="$PWD/build/backend/libtriton_bertserve.so"
  timeout 200 "$py" - "$repo" "${CLIENTS:-1x64 4x16 1x256 4x64 8x32}" <<'PY' 2>&1 | grep -v ' INFO '
import json, sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_perf_analyzer
from reliability import processes

repo, pairs = Path(sys.argv[1]).resolve(), sys.argv[2].split()
with processes.running(repo, Path("/tmp/clients.log")) as server:
    binary, libdir = ensure_perf_analyzer(Path("build"))
    data = Path("/tmp/clients.json")
    data.write_text(json.dumps(perf_analyzer_input_data(build_pool(LoadTestConfig(payload="corpus"), "text"))))

    def one(k, conc):
        try:
            return run_perf_analyzer(binary, libdir, server.grpc_url, "embed", conc, data, Path(f"/tmp/clients-{k}.csv"),
                                     3000, 50.0, max_trials=3)
        except RuntimeError as e:
            return {"error": str(e)[-200:]}

    for pair in pairs:
        k, conc = (int(x) for x in pair.split("x"))
        with ThreadPoolExecutor(k) as pool:
            rows = list(pool.map(lambda i: one(i, conc), range(k)))
        ok = [r for r in rows if "error" not in r]
        total = round(sum(r["throughput"] for r in ok))
        print("clients", json.dumps({"processes": k, "concurrency_each": conc, "seq_s_total": total,
                                     "p50_ms": [r["p50_ms"] for r in ok], "p99_ms": [r["p99_ms"] for r in ok],
                                     "errors": [r["error"] for r in rows if "error" in r]}), flush=True)
PY
}

compare() {
  local v label lib instances deadline settings
  for v in $VARIANTS; do
    IFS=: read -r label lib instances deadline settings <<<"$v"
    echo "== variant $label $(date +%T): $(configure "$instances" "$deadline") ${settings:-}"
    (
      [ -z "${settings:-}" ] || export ${settings//+/ }
      one "$label" "$lib"
    )
  done
  grep -h "costs measured\|buckets captured" /tmp/busy-*.log | tail -4
}

for stage in "$@"; do
  echo "== $stage $(date +%T)"
  "$stage" || { echo "$stage failed"; exit 1; }
done
