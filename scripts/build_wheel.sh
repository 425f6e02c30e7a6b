#!/usr/bin/env bash
# Builds the Python package once as a wheel, dist/diffract_spectral-VERSION-TAG.whl, to install with
# `pip install dist/diffract_spectral-*.whl` (into any environment of the same Python, without compiling again).
# The build is incremental (build-python/<wheel tag>/, kept between runs: --no-build-isolation, so that
# scikit-build-core does not clear it) and compiled through ccache when installed.
# Needs nanobind and scikit-build-core: scripts/setup_debian.sh installs them into .venv, whose python
# builds the wheel (PYTHON=... for another).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-${DIFFRACT_VENV:-$PWD/.venv}/bin/python}
rm -f dist/diffract_spectral-*.whl
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps --wheel-dir dist .
ls dist/diffract_spectral-*.whl
