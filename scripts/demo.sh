#!/usr/bin/env bash
# The main job on the bundled demo: install dependencies, build, generate the synthetic model
# family, inspect it and analyze it. Results land in demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_debian.sh
bash scripts/build.sh
rm -rf demo
./build/diffract generate --out demo/family
./build/diffract inspect demo/family/math | head -n 12
./build/diffract analyze demo/family/pretrained demo/family/math demo/family/code demo/family/text \
  --out demo/analysis --store demo/results.sqlite
echo "demo: wrote demo/analysis/metrics.csv and demo/analysis/aggregates.csv"
