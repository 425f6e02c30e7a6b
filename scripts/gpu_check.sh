#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (see the device tool): builds the CUDA backend (or uses a
# carried build-cuda/), runs the CPU-vs-CUDA parity test and the benchmark on the device, and leaves
# the figures in $OUT (or ./gpu_out). Usage: bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
if [ ! -x build-cuda/diffract ]; then
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cmake -S . -B build-cuda -G Ninja -DDIFFRACT_CUDA=ON -DDIFFRACT_MPI=OFF -DDIFFRACT_TESTS=ON -DDIFFRACT_BENCH=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" > "$out/configure.log" 2>&1
  cmake --build build-cuda -j"$(nproc)" > "$out/build.log" 2>&1
fi
./build-cuda/tests/diffract_tests --gtest_filter='CudaBackend*:GramBatch*' 2>&1 | tee "$out/unit.txt"
DIFFRACT_BIN=build-cuda/diffract DIFFRACT_CUDA_BIN=build-cuda/diffract DIFFRACT_TOOLS_DIR=build-cuda/tests \
  python3 -m pytest -q tests/python/test_cuda_parity.py 2>&1 | tee "$out/parity.txt"
./build-cuda/bench/bench_analyze --device cuda --layers 2 | tee "$out/bench_cuda.json"
./build-cuda/bench/bench_analyze --device cpu --layers 1 --threads "$(nproc)" | tee "$out/bench_cpu.json"
