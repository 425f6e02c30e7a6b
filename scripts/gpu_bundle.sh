#!/usr/bin/env bash
# Packs what a lent GPU machine needs to run scripts/gpu_check.sh. That machine has the CUDA toolkit,
# CMake and a Python with numpy and pytest, but none of our Debian libraries (OpenBLAS, SQLite, fmt)
# and no network, so building there is not an option. This builds the CUDA backend here, without MPI
# (its runtime is not there either), and packs the binaries with every shared library they load
# except glibc's and CUDA's own (the C++ runtime only as a fallback) into .gpu/bundle.tar.xz (git-ignored,
# about 8 MB).
# Then, in a session lent a GPU: run(carry=[".gpu"], command="bash scripts/gpu_check.sh").
set -euo pipefail
cd "$(dirname "$0")/.."
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DDIFFRACT_CUDA=ON -DDIFFRACT_MPI=OFF \
  -DDIFFRACT_TESTS=ON -DDIFFRACT_BENCH=ON -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null
cmake --build build-gpu -j"$(nproc)" --target diffract diffract_tests bench_analyze bench_compare
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/lib-fallback"
cp build-gpu/diffract build-gpu/tests/diffract_tests build-gpu/bench/bench_analyze build-gpu/bench/bench_compare "$stage/bin/"
strip "$stage"/bin/*
for lib in $(ldd "$stage"/bin/* | awk '/=> \// {print $3}' | sort -u); do
  case "$(basename "$lib")" in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libcu* | libnvJitLink*) ;;
    # The machine's own C++ runtime is at least as new as this one (and CUDA's libraries may need
    # its newer symbols): ours is used only where the machine has none.
    libstdc++.so.* | libgcc_s.so.*) cp -L "$lib" "$stage/lib-fallback/" ;;
    *) cp -L "$lib" "$stage/lib/" ;;
  esac
done
mkdir -p .gpu
tar -C "$stage" -cJf .gpu/bundle.tar.xz bin lib lib-fallback
ls -la .gpu/bundle.tar.xz
