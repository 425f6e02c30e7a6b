#!/usr/bin/env bash
# The 7B-shaped figures of issue 16: analyze (default catalog, per-head rows) and compare of two
# checkpoints (heads too), both under --max-memory, timed by /usr/bin/time (wall, CPU, peak RSS).
# Generates the OLMo-2-7B-shaped base and one continued-pre-training model once (bf16, 14 GB each).
#
#   bench/scale_7b.sh WORKDIR [analyze|compare|both] [extra diffract options, e.g. --layers 0,1]
#
# Env: THREADS (default nproc), MAX_MEMORY (default 4G), PRESET (default 7b; 1b for a quick try).
# Each run uses a fresh store, so nothing is reused; the page cache is as the generation left it.
set -euo pipefail
work=$1 what=${2:-both}
shift $(($# < 2 ? $# : 2))
bin=$(cd "$(dirname "$0")/.." && pwd)/build/diffract
threads=${THREADS:-$(nproc)} budget=${MAX_MEMORY:-4G} preset=${PRESET:-7b}
mkdir -p "$work" && cd "$work"
[ -d fam/math ] || { rm -rf fam && "$bin" generate --preset "$preset" --models pretrained,math --out fam; }

timed() {  # timed NAME diffract-args...: one line of figures, then the tool's own last line
  local name=$1
  shift
  rm -rf "out-$name" "store-$name.sqlite"
  /usr/bin/time -f "$name: %e s wall, %U s user, %S s system, %M KB peak RSS, exit %x" \
    "$bin" "$@" --out "out-$name" --store "store-$name.sqlite" --threads "$threads" --max-memory "$budget" \
    --quiet 2>&1 | tail -n 2
}
"$bin" --version | tail -n 1  # the BLAS kernels in use (an OPENBLAS_CORETYPE pin halves the products)
case $what in analyze | both) timed analyze analyze fam/pretrained "$@" ;; esac
case $what in compare | both) timed compare compare --base fam/pretrained fam/math "$@" ;; esac
