#!/usr/bin/env bash
# The main job on the bundled demo: install dependencies, build, generate the synthetic model
# family, inspect it, analyze it, compare the CPT models with the base, and build the report.
# Results land in demo/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_debian.sh
bash scripts/build.sh
rm -rf demo
./build/diffract generate --out demo/family
./build/diffract inspect demo/family/math > demo/inspect.txt
head -n 12 demo/inspect.txt
./build/diffract analyze demo/family/pretrained demo/family/math demo/family/code demo/family/text \
  --out demo/analysis --store demo/results.sqlite
./build/diffract compare --base demo/family/pretrained demo/family/math demo/family/code \
  --reference demo/family/text --out demo/compare --store demo/results.sqlite
./build/diffract report demo/analysis demo/compare --store demo/results.sqlite --out demo/report.html
echo "demo: demo/analysis/metrics.csv, demo/compare/heads.csv (head importance), demo/report.html"
