"""The demo's finding in one table: the heads each continued pre-training changed most, by importance
(heads.csv of `diffract compare`), and whether they are the heads the synthetic family planted
(planted.json of `diffract generate`). Standard library only.

    python3 scripts/demo_finding.py COMPARE_DIR/heads.csv FAMILY_DIR/planted.json
"""
import csv
import json
import sys
from collections import defaultdict


def main(heads_csv: str, planted_json: str) -> int:
    planted = json.load(open(planted_json))["domain_heads"]
    by_model = defaultdict(list)
    with open(heads_csv, newline="") as f:
        for row in csv.DictReader(f):
            if row.get("order", "importance") == "importance":
                by_model[row["model"]].append(row)
    print("Top heads by importance (what each continued pre-training changed beyond the reference's drift):")
    print(f"{'model':<8} {'rank':>4}  {'layer:head':<10} {'importance':>10} {'update_norm':>11}  planted")
    verdicts = []
    for model, rows in by_model.items():
        rows.sort(key=lambda r: -float(r["importance"]))
        truth = {(int(l), int(h)) for l, h in planted.get(model, [])}
        k = len(truth) or 8
        for i, r in enumerate(rows[:k], 1):
            head = (int(r["layer"]), int(r["head"]))
            mark = "yes" if head in truth else ("no" if truth else "-")
            where = f"{head[0]}:{head[1]}"
            print(f"{model:<8} {i:>4}  {where:<10} {float(r['importance']):>10.3f} "
                  f"{float(r['update_norm']):>11.3f}  {mark}")
        if truth:
            found = sum((int(r["layer"]), int(r["head"])) in truth for r in rows[:k])
            verdicts.append(f"{model}: {found}/{len(truth)} planted heads recovered in the top {k}")
    for v in verdicts:
        print(v)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2]))
