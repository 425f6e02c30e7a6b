#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine:
#   1. dependencies (scripts/setup_debian.sh: Debian packages, and the project's Python environment
#      .venv made from Debian's own python3, which PEP 668 keeps us from installing into)
#   2. Release build + every CTest test (GoogleTest units and the pytest suite, in .venv); the Python
#      package installed the way a user installs it: `pip install .` with build isolation
#   3. AddressSanitizer + UndefinedBehaviorSanitizer build, unit tests under it
#   4. each libFuzzer target for a bounded time (FUZZ_SECONDS, default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_debian.sh

py=${DIFFRACT_VENV:-$PWD/.venv}/bin/python

echo "== release build and tests"
bash scripts/build.sh
"$py" -m pip install --quiet --disable-pip-version-check .
ctest --test-dir build --output-on-failure -j1

echo "== sanitizer build (ASan + UBSan) and unit tests"
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DDIFFRACT_SANITIZE=ON -DDIFFRACT_BENCH=OFF >/dev/null
cmake --build build-asan -j"$(nproc)" --target diffract_tests
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ./build-asan/tests/diffract_tests --gtest_brief=1

echo "== CUDA backend (compiles and links here; runs where a GPU is lent: scripts/gpu_check.sh)"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cmake -S . -B build-cuda -G Ninja -DDIFFRACT_CUDA=ON -DDIFFRACT_TESTS=OFF -DDIFFRACT_BENCH=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
cmake --build build-cuda -j"$(nproc)"

echo "== fuzzing (bounded)"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-20}"
echo "all test stages passed"
