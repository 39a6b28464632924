#!/usr/bin/env bash
# BERT-base's tasks served side by side on one CUDA GPU, concurrency 1 (the tasks issue's GPU table):
#   bash bench/gpu_tasks.sh prepare serve
# prepare: the venv and the backend (bench/gpu_venv.sh); a cross-encoder of BERT-base's shape drawn from a seed
# (export/cross_encoder.py: no reranker weights ship; its scores time the path, they rank nothing), exported for
# CUDA beside BERT-base's embedder (fp16) into one repository; the reranker as export chooses (fp32 and fp16, each
# gated; the manifest says which serves and why).
# serve: per value of the reranker's cuda_graphs parameter (GRAPHS: "false true"), one server: its scores against
# transformers' model, bench.rerank_served (rerank 1 x 32 documents beside embed of the same 32 texts, over gRPC and
# the gateway's routes); with the first value only, perf_analyzer on one text a request at concurrency 64 over gRPC
# and over HTTP, whose frontends have 2 and 8 infer threads; then two servers on the GPU, each at concurrency 32.
# Carries .whl and .gpu (`bash bench/gpu_bundle.sh`). Knobs (env): REQUESTS (300); EMBED=0: the reranker alone
# (no embedder, no one-text loads); RERANK_PRECISION: the reranker's precisions (export's default: fp32+fp16).
source bench/gpu_venv.sh
repo=build/gpu-tasks
checkpoint=/tmp/seeded-bert-base-rerank

prepare() {
  [ -f build/backend/libtriton_bertserve.so ] || build_backend || return 1
  PYTHONPATH=/tmp/export-site python3 -c 'import sys; from pathlib import Path; from export import cross_encoder
cross_encoder.build_seeded(Path(sys.argv[1]), body="bert-base")' "$checkpoint" || return 1
  local start=$SECONDS embed=""
  [ "${EMBED:-1}" = 0 ] || embed="--model embed=bert-base,precision=fp16"
  # shellcheck disable=SC2086 # $embed: one option and its value, or nothing
  PYTHONPATH=/tmp/export-site timeout "${EXPORT_TIMEOUT_S:-560}" python3 -m export --execution-env "$venv" \
    --target cuda $embed --model "rerank=$checkpoint${RERANK_PRECISION:+,precision=$RERANK_PRECISION}" --max-batch 128 \
    --max-seq 128 --max-queue-delay-us 0 --encoder-backend native --skip onnx,torchscript --output "$repo" \
    >"$out/tasks-export.log" 2>&1
  tail -8 "$out/tasks-export.log"
  echo "export: $((SECONDS - start)) s"
  [ -f "$repo/repository.json" ] || return 1
  "$py" -c 'import json, sys; m = json.load(open(sys.argv[1]))
print("rerank manifest:", json.dumps({k: m.get(k) for k in ("precision", "serving", "gates", "fp16", "compile_report")})[:3000])' \
    "$repo/rerank/manifest.json"
}

graphs() {  # $1: true or false, the reranker's cuda_graphs parameter, recorded in its manifest
  local config="$repo/rerank/config.pbtxt"
  sed -i '/key: "cuda_graphs"/d' "$config"
  echo "parameters { key: \"cuda_graphs\" value { string_value: \"$1\" } }" >>"$config"
  "$py" -c 'import sys; from pathlib import Path; from reliability.copies import record_config
record_config(Path(sys.argv[1]))' "$repo/rerank"
}

serve() {
  local g
  for g in ${GRAPHS:-false true}; do
    echo "== the reranker with cuda_graphs $g $(date +%T)"
    graphs "$g" || return 1
    one "$g"
  done
}

one() {  # $1: the reranker's cuda_graphs; the one-text loads run with the first only
  timeout 400 "$py" - "$repo" "${REQUESTS:-300}" "$checkpoint" "$1" "${GRAPHS:-false true}" <<'PY' 2>&1 | grep -v ' INFO '
import json, subprocess, sys, threading
from pathlib import Path
from loadtest.config import LoadTestConfig
from loadtest.payload import build_pool, perf_analyzer_input_data
from loadtest.perf_analyzer_compare import ensure_perf_analyzer, run_perf_analyzer
from reliability import processes

repo, requests = Path(sys.argv[1]).resolve(), sys.argv[2]
log = Path("/tmp/tasks-server.log")
with processes.running(repo, log) as server:
    print([line for line in log.read_text().splitlines() if "rerank" in line and "loaded" in line][-2:], flush=True)
    # The served scores against transformers' own model (fp32, eager) on the benchmark's query and documents.
    try:
        import numpy as np, torch, tritonclient.grpc as grpcclient
        from bench.rerank_served import _bytes_input, documents
        from export import cross_encoder
        from transformers import AutoTokenizer
        query, docs = documents()
        got = grpcclient.InferenceServerClient(server.grpc_url).infer(
            "rerank", [_bytes_input("QUERY", [query], [1, 1]), _bytes_input("DOCUMENTS", docs, [1, len(docs)])]
        ).as_numpy("SCORES").reshape(-1)
        model = cross_encoder.CrossEncoder(cross_encoder.load(Path(sys.argv[3]))).cuda()
        enc = AutoTokenizer.from_pretrained(sys.argv[3])([query] * len(docs), docs, truncation="longest_first",
                                                         max_length=128, padding=True, return_tensors="pt").to("cuda")
        with torch.no_grad():
            want = model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).cpu().numpy()
        order = lambda x: np.argsort(np.argsort(-x))
        print("served vs eager fp32: max abs diff", float(np.abs(got - want).max()), "score range",
              float(want.min()), float(want.max()), "rank agreement", float(np.mean(order(got) == order(want))), flush=True)
    except Exception as e:  # noqa: BLE001 - the comparison is a report: the timings still run
        print("served vs eager fp32: failed:", repr(e)[-400:], flush=True)
    embed = (repo / "embed").is_dir()
    urls = ["--rerank-url", server.grpc_url, "--gateway-url", server.gateway_url]
    urls += ["--embed-url", server.grpc_url] if embed else []
    subprocess.run([sys.executable, "-m", "bench.rerank_served", *urls, "--requests", requests], check=False)
    if not embed or sys.argv[4] != sys.argv[5].split()[0]:
        sys.exit(0)
    binary, libdir = ensure_perf_analyzer(Path("build"))
    data = Path("/tmp/tasks-one-text.json")
    data.write_text(json.dumps(perf_analyzer_input_data(build_pool(LoadTestConfig(payload="corpus"), "text"))))
    for protocol, url in (("grpc", server.grpc_url), ("http", server.http_url), ("grpc", server.grpc_url)):
        try:
            r = run_perf_analyzer(binary, libdir, url, "embed", 64, data, Path("/tmp/tasks-pa.csv"), 2000, 50.0,
                                  max_trials=3, protocol=protocol)
        except RuntimeError as e:
            r = {"error": str(e)[-300:]}
        print("one text c=64", protocol, json.dumps(r), flush=True)
    # A second tritonserver on the same GPU, each loaded at concurrency 32: is one server's gRPC frontend the ceiling?
    with processes.running(repo, Path("/tmp/tasks-server-2.log")) as second:
        results = {}

        def load(name, url):
            try:
                results[name] = run_perf_analyzer(binary, libdir, url, "embed", 32, data, Path(f"/tmp/pa-{name}.csv"),
                                                  2000, 50.0, max_trials=3)
            except RuntimeError as e:
                results[name] = {"error": str(e)[-300:]}

        threads = [threading.Thread(target=load, args=(n, u)) for n, u in (("a", server.grpc_url), ("b", second.grpc_url))]
        [t.start() for t in threads]
        [t.join() for t in threads]
        total = sum(r.get("throughput", 0.0) for r in results.values())
        print("one text, two servers at c=32 each", json.dumps({"total": total, **results}), flush=True)
PY
}

for stage in "$@"; do
  echo "== $stage $(date +%T)"
  "$stage" || { echo "$stage failed"; exit 1; }
done
