#!/usr/bin/env bash
# Configures and builds diffract into build/ (Release). Extra arguments go to CMake's configure;
# BUILD_TARGETS="a b" builds only those targets (the demo builds the CLI alone).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (when installed): a rebuild from scratch (a new build directory, a reconfigure) is cache hits.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
# The tests' Python is the project's environment (scripts/setup_debian.sh), never the system's.
python=()
venv_python=${DIFFRACT_VENV:-$PWD/.venv}/bin/python
[ -x "$venv_python" ] && python=(-DPython3_EXECUTABLE="$venv_python")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "${python[@]}" "$@" >/dev/null
targets=()
for t in ${BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build build -j"$(nproc)" "${targets[@]}"
