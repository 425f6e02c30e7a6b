#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (the parser sources coverage-instrumented, see
# tests/fuzz/CMakeLists.txt) and runs each for SECONDS (default 30) from its seed corpus; prints
# each target's edge coverage. The corpora are replayed by the unit tests (fuzz_corpus_test.cpp).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
cmake -S . -B build-fuzz -G Ninja -DDIFFRACT_FUZZ=ON -DDIFFRACT_FUZZ_INSTRUMENT=ON -DDIFFRACT_TESTS=OFF \
  -DDIFFRACT_BENCH=OFF -DDIFFRACT_WERROR=OFF -DDIFFRACT_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
targets=()
for src in tests/fuzz/*_fuzz.cpp; do targets+=("$(basename "$src" .cpp)"); done
cmake --build build-fuzz -j"$(nproc)" --target "${targets[@]}"
for name in "${targets[@]}"; do
  corpus=tests/fuzz/corpus/$name
  work=$(mktemp -d)
  [ -d "$corpus" ] && cp -r "$corpus"/. "$work"/
  echo "fuzz: $name for ${seconds}s"
  log=$(mktemp)
  status=0
  "build-fuzz/tests/fuzz/$name" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=0 \
    "$work" >"$log" 2>&1 || status=$?
  tail -n 2 "$log"
  echo "fuzz: $name edges: $(grep -oE 'cov: [0-9]+' "$log" | tail -n 1 | cut -d' ' -f2)"
  rm -rf "$work" "$log"
  [ "$status" -eq 0 ] || { echo "fuzz: $name found a problem (exit $status)"; exit "$status"; }
done
