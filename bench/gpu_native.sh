#!/usr/bin/env bash
# The native serving path on one CUDA GPU, against the Python backend on the same machine and artifact.
#   bash bench/gpu_native.sh prepare  # the venv; the backend built against the machine's CUDA torch; BERT-base fp16
#                                     # exported for the native backend; whether the C++ loader needs the preload
#   bash bench/gpu_native.sh bert     # bench.backends: bert native vs its Python twin, in-process reference
#   bash bench/gpu_native.sh embed    # bench.served on embed (the corpus, 32 and 1 texts a request), both backends
# Stages run in the order given; a later call on the same machine reuses what `prepare` left in /tmp and build/.
# Carries .whl and .gpu (`bash bench/gpu_bundle.sh`). Knobs (env): INSTANCES (1), ROUNDS (2), CONCURRENCY,
# EXPORT_ARGS.
source bench/gpu_venv.sh
repo=build/gpu-repository
twin=build/gpu-twin

prepare() {
  {
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
    python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
    g++ --version | head -1
    cmake --version | head -1
  } | tee "$out/gpu.txt"
  build_backend || return 1
  # shellcheck disable=SC2086 # EXPORT_ARGS: more options, split on spaces
  export_bert "$repo" "$out/export.log" --precision fp16 ${EXPORT_ARGS:-} | tee -a "$out/gpu.txt"
  [ -f "$repo/repository.json" ] || return 1
  # Python's aoti_load_package segfaulted on CUDA packages on this image unless the system libstdc++ was preloaded
  # (bench/gpu_env.sh): the server once with the preload and once without tells whether the C++ loader needs it.
  for preload in "$LD_PRELOAD" ""; do
    LD_PRELOAD="$preload" timeout 150 "$py" - "$repo" "${preload:-none}" <<'PY' 2>&1 | tee -a "$out/gpu.txt"
import sys
from pathlib import Path
from reliability import processes

repo, preload = Path(sys.argv[1]).resolve(), sys.argv[2]
log = Path(f"/tmp/loader-{'preload' if preload != 'none' else 'none'}.log")
server = processes.start(repo, log)
try:
    print(f"server with LD_PRELOAD={preload}: ready in {server.wait_ready(120, poll_s=0.05):.2f} s")
except Exception as e:  # noqa: BLE001 - the outcome is the report
    print(f"server with LD_PRELOAD={preload}: not ready ({e}); log tail:\n" + log.read_text()[-3000:])
finally:
    processes.stop(server)
    lines = [line for line in log.read_text().splitlines() if "buckets captured" in line or "loaded on" in line]
    print("\n".join(lines[-4:]))
PY
  done
}

bert() {
  timeout "${BERT_TIMEOUT_S:-560}" "$py" -m bench.backends --repository "$repo" --device cuda \
    --rounds "${ROUNDS:-2}" --tokens 128 --concurrency "${CONCURRENCY:-16,64,256}" --window-ms 2000 \
    --in-process-calls 2000 --label cuda --output-dir "$out" 2>&1 | grep -v ' INFO ' | tail -30
}

embed() {
  [ -d "$twin" ] || "$py" -c "import sys; from pathlib import Path; from bench.backends import python_twin
python_twin(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve())" "$repo" "$twin" || return 1
  for r in "$repo" "$twin"; do
    timeout "${EMBED_TIMEOUT_S:-270}" "$py" -m bench.served --repository "$r" --cases embed-corpus-b32,embed-corpus \
      --concurrency "${CONCURRENCY:-1,16,64,128,256}" --duration-s 6 --window-ms 2000 \
      --label "cuda-$(basename "$r")" --output-dir "$out" 2>&1 | grep -v ' INFO ' | tail -25
    rm -rf "$out/served-cuda-$(basename "$r")-work"
  done
}

for stage in "$@"; do
  echo "== $stage $(date +%T)"
  "$stage" || { echo "$stage failed"; exit 1; }
done
