#!/usr/bin/env bash
# The course's GPU chain on one CUDA GPU, each step exported, timed in-process and served, side by side:
#   bash bench/gpu_chain.sh prepare exports inprocess served
#   bash bench/gpu_chain.sh probe   # fp16, fp8 and fp8 on the FFN only compiled in process, gates aside
# prepare:   bench/gpu_native.sh's (venv, backend, BERT-base fp16 untuned into build/gpu-repository)
# exports:   fp16 with --autotune into build/gpu-repo-tuned, fp8 into build/gpu-repo-fp8, each timed
# inprocess: python -m bench.chain over the three (served packages, CUDA-graph replays, interleaved rounds)
# served:    bench.served on each (CASES: the corpus at 1 and 32 texts a request); on the untuned fp16 one also
#            bert at 128 tokens.
# probe:     python -m bench.chain --build: each precision compiled as export would, timed and scored against eager
#            fp32 whether or not its gates pass (export ships none that fails).
# Knobs (env): BASE (the untuned repository), FP8=0 (no fp8 export), CASES.
# Carries .whl and .gpu (`bash bench/gpu_bundle.sh`). Stages run in the order given; later calls on the same
# machine reuse what earlier ones left in /tmp and build/.
source bench/gpu_venv.sh
base="${BASE:-build/gpu-repository}" # or a repository whose embedder is BERT-base fp16 (bench/gpu_tasks.sh)
tuned=build/gpu-repo-tuned
fp8=build/gpu-repo-fp8
CASES="${CASES:-embed-corpus@1/64/128/256,embed-corpus-b32@8/16/32}"

prepare() {
  bash bench/gpu_native.sh prepare
}

exports() {
  EXPORT_TIMEOUT_S="${TUNED_TIMEOUT_S:-900}" export_bert "$tuned" "$out/export-tuned.log" --precision fp16 --autotune
  # shellcheck disable=SC2086 # FP8_ARGS: more options, split on spaces
  [ "${FP8:-1}" = 0 ] || export_bert "$fp8" "$out/export-fp8.log" --precision fp8 ${FP8_ARGS:-}
  grep -h "autotuned for\|bert serves\|retrieval set\|gate" "$out"/export-*.log | tail -12
}

inprocess() {
  local repos="fp16=$base" r
  for r in "fp16-tuned=$tuned" "fp8=$fp8"; do
    [ -f "${r#*=}/repository.json" ] && repos="$repos,$r"
  done
  timeout "${CHAIN_TIMEOUT_S:-300}" "$py" -m bench.chain --repositories "$repos" --output-dir "$out" 2>&1 \
    | grep -v ' INFO '
}

served() {
  local label repo cases
  for label in fp16 fp16-tuned fp8; do
    case $label in
      fp16) repo=$base cases="$CASES,bert-128@256" ;;
      fp16-tuned) repo=$tuned cases=$CASES ;;
      fp8) repo=$fp8 cases=$CASES ;;
    esac
    [ -f "$repo/repository.json" ] || { echo "$label: no repository"; continue; }
    echo "== served $label $(date +%T)"
    rm -rf /tmp/bertserve-backends-*
    timeout "${SERVED_TIMEOUT_S:-300}" "$py" -m bench.served --repository "$repo" --cases "$cases" --duration-s 3 \
      --window-ms 1500 --label "chain-$label" --output-dir "$out" 2>&1 | grep -v ' INFO ' | tail -45
  done
}

probe() {
  PYTHONPATH=/tmp/export-site timeout "${PROBE_TIMEOUT_S:-600}" python3 -m bench.chain --build "${PROBE:-fp16,fp8,fp8-ffn}" \
    --model bert-base --rounds "${ROUNDS:-5}" --output-dir "$out" 2>&1 | grep -v ' INFO \|Warning\|warn('
}

for stage in "$@"; do
  echo "== $stage $(date +%T)"
  "$stage" || { echo "$stage failed"; exit 1; }
done
