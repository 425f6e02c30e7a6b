#!/usr/bin/env bash
# Configures and builds diffract into build/ (Release). Extra arguments go to CMake's configure.
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache (when installed): a rebuild from scratch (a new build directory, a reconfigure) is cache hits.
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" "$@" >/dev/null
cmake --build build -j"$(nproc)"
