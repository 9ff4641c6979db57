#!/usr/bin/env bash
# Installs the Debian 12 packages that pprofkit's build, tests and demo need.
# Fast when nothing is missing: it asks dpkg first and runs apt-get only for what lacks.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(
    build-essential cmake pkg-config          # compiler, make, build system
    zlib1g-dev libzstd-dev libxxhash-dev      # library dependencies
    libcurl4-openssl-dev                      # library dependency: HTTP uploads
    protobuf-compiler python3-protobuf        # tests: protoc --decode, OTLP decoding
    golang-go golang-github-google-pprof-dev  # tests and demo: go tool pprof, profile.proto
    python3 python3-dev zstd                  # the Python package; tests: zstd -d
    chromium                                  # tests: the flame graph page in a browser
    clang libclang-rt-14-dev                  # CI: the libFuzzer build
    git ca-certificates
)

missing=()
for pkg in "${packages[@]}"; do
    status=$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "installed" ]]; then
        missing+=("$pkg")
    fi
done

if ((${#missing[@]} == 0)); then
    echo "deps.sh: all ${#packages[@]} packages are installed"
    exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
    sudo=(sudo)
fi

echo "deps.sh: installing ${missing[*]}"
"${sudo[@]}" apt-get update
"${sudo[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
