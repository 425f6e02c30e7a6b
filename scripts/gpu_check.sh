#!/usr/bin/env bash
# The GPU check, run on a lent GPU machine (see the device tool) in one call:
#   run(carry=[".gpu"], command="bash scripts/gpu_check.sh", timeout_s=540)
# after `bash scripts/gpu_bundle.sh` here. Uses the carried bundle (.gpu/bundle.tar.xz), or builds
# build-cuda/ where the machine has every library. Runs the CUDA unit tests (CPU vs GPU on the
# device-only paths), the CLI parity test, bench_analyze and bench_compare on the GPU and the CPU; each step runs
# whatever the previous ones did, and everything lands in $OUT (or ./gpu_out).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu_out}
mkdir -p "$out"
nvidia-smi > "$out/nvidia-smi.txt" 2>&1
if [ -f .gpu/bundle.tar.xz ]; then
  root=/tmp/diffract-gpu
  mkdir -p "$root" && tar -C "$root" -xJf .gpu/bundle.tar.xz
  bin=$root/bin tools=$root/bin
  # CUDA's libraries: the toolkit's, else the pip wheels' (nvidia-*) of the machine's Python.
  cuda_dirs=$( (find /usr/local/cuda*/lib* "$(python3 -c 'import site; print(site.getsitepackages()[0])')/nvidia" \
    \( -name 'libcublas.so.*' -o -name 'libcusolver.so.*' -o -name 'libcudart.so.*' \) -printf '%h\n' 2>/dev/null) |
    sort -u | paste -sd:)
  fallback=""
  ldconfig -p | grep -q 'libstdc++.so.6 ' || fallback=":$root/lib-fallback"
  export LD_LIBRARY_PATH=$root/lib$fallback:$cuda_dirs:${LD_LIBRARY_PATH:-}
else
  nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  cmake -S . -B build-cuda -G Ninja -DDIFFRACT_CUDA=ON -DDIFFRACT_MPI=OFF -DDIFFRACT_TESTS=ON -DDIFFRACT_BENCH=ON \
    -DCMAKE_CUDA_COMPILER="$nvcc" > "$out/configure.log" 2>&1 && cmake --build build-cuda -j"$(nproc)" > "$out/build.log" 2>&1
  bin=build-cuda tools=build-cuda/tests
fi
find "$bin" -maxdepth 2 -type f \( -name diffract -o -name diffract_tests -o -name 'bench_*' \) | xargs -r ldd > "$out/ldd.txt" 2>&1
tests=$(find "$bin" -name diffract_tests | head -1) bench=$(find "$bin" -name bench_analyze | head -1)
bench_compare=$(find "$bin" -name bench_compare | head -1)
# Each step is bounded (STEP_SECONDS, default 200), so one slow step cannot spend the whole lease.
step() { echo "== $1"; shift; timeout "${STEP_SECONDS:-200}" "$@" || echo "step failed (exit $?)"; }
{
  step "unit tests on the GPU" "$tests" --gtest_filter='CudaBackend*:GramBatch*'
  step "CLI parity" env DIFFRACT_BIN="$bin/diffract" DIFFRACT_CUDA_BIN="$bin/diffract" DIFFRACT_TOOLS_DIR="$tools" \
    python3 -m pytest -q -p no:cacheprovider tests/python/test_cuda_parity.py
} 2>&1 | tee "$out/tests.txt"
step "bench on the GPU" "$bench" --device cuda --layers 2 2>&1 | tee "$out/bench_cuda.json"
step "bench on the CPU" "$bench" --device cpu --layers 1 --threads "$(nproc)" 2>&1 | tee "$out/bench_cpu.json"
step "compare bench on the GPU" "$bench_compare" --device cuda --shapes 8192x2048,16384x4096,4096x4096 2>&1 |
  tee "$out/bench_compare_cuda.json"
step "compare bench on the CPU" "$bench_compare" --device cpu --shapes 8192x2048,4096x4096 2>&1 |
  tee "$out/bench_compare_cpu.json"
