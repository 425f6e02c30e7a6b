#!/usr/bin/env bash
# Builds the Python package once as a wheel, dist/diffract-VERSION-TAG.whl, to install with
# `pip install dist/diffract-*.whl` (into any environment of the same Python, without compiling again).
# The build is incremental (build-python/<wheel tag>/, kept between runs: --no-build-isolation, so that
# scikit-build-core does not clear it) and compiled through ccache when installed.
# Needs nanobind and scikit-build-core (scripts/setup_debian.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rm -f dist/diffract-*.whl
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps --wheel-dir dist .
ls dist/diffract-*.whl
