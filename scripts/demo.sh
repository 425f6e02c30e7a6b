#!/usr/bin/env bash
# The main job on the bundled demo: install dependencies, build the CLI, generate the synthetic model
# family, inspect it, analyze it, compare the CPT models with the base, build the report, and print
# the finding. Results land in demo/; the set-up and build logs too (demo/setup.log, demo/build.log).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf demo
mkdir -p demo
step() { echo "demo: $*"; }
quietly() {  # runs a noisy step into its log; on failure shows the log's end
  local log=$1
  shift
  "$@" >"$log" 2>&1 || { tail -n 30 "$log"; echo "demo: failed, see $log"; exit 1; }
}
step "installing dependencies (Debian packages, the project's Python environment .venv) -> demo/setup.log"
quietly demo/setup.log bash scripts/setup_debian.sh
step "building the diffract CLI (only what the demo runs; the tests build in scripts/test.sh) -> demo/build.log"
BUILD_TARGETS=diffract_cli quietly demo/build.log bash scripts/build.sh
d=./build/diffract
py=${DIFFRACT_VENV:-.venv}/bin/python

step "generating the synthetic family: a pre-trained model, continued pre-training on math and on code,"
step "  a reference continued on text (generic drift only), with planted domain heads -> demo/family"
$d generate --out demo/family
$d inspect demo/family/math >demo/inspect.txt
step "inspect: $(grep -m1 -E '^(architecture|model_type)' demo/inspect.txt || head -n 1 demo/inspect.txt) (all of it: demo/inspect.txt)"
$d analyze demo/family/pretrained demo/family/math demo/family/code demo/family/text \
  --out demo/analysis --store demo/results.sqlite
$d compare --base demo/family/pretrained demo/family/math demo/family/code \
  --reference demo/family/text --out demo/compare --store demo/results.sqlite
$d report demo/analysis demo/compare --store demo/results.sqlite --out demo/report.html
echo
"$py" scripts/demo_finding.py demo/compare/heads.csv demo/family/planted.json
echo
step "outputs: demo/analysis/metrics.csv (every matrix and head), demo/compare/heads.csv (head importance),"
step "  demo/report.html (figures); analyze or compare again with --store demo/results.sqlite reuses every result"
