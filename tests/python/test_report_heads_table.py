"""The report opens with the heads that changed most and least per model (issue 31, item 3), read from
heads.csv. Independent fact: heads.csv itself, sorted here."""

import csv
import re

from conftest import run


def test_report_ranks_the_heads_of_each_model(family_f32, tmp_path):
    fam = family_f32
    run(["compare", "--base", fam / "pretrained", fam / "math", fam / "code", "--reference", fam / "text", "--out",
         tmp_path / "cmp", "--store", tmp_path / "s.sqlite", "--quiet"])
    run(["report", tmp_path / "cmp", "--out", tmp_path / "r.html", "--quiet"])
    html = (tmp_path / "r.html").read_text()
    assert html.index("Heads that changed most and least") < html.index("<nav>")  # at the top
    with open(tmp_path / "cmp" / "heads.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    for model in ("math", "code"):
        mine = sorted((r for r in rows if r["model"] == model),
                      key=lambda r: (-float(r["importance"]), int(r["layer"]), int(r["head"])))
        table = re.search(rf"<caption>{model} — changed most</caption>(.*?)</table>", html, re.S).group(1)
        shown = re.findall(r"<tr><td>\d+</td><td>(\d+):(\d+)</td>", table)
        assert shown == [(r["layer"], r["head"]) for r in mine[:5]]
        least = re.search(rf"<caption>{model} — changed least</caption>(.*?)</table>", html, re.S).group(1)
        assert re.findall(r"<tr><td>\d+</td><td>(\d+):(\d+)</td>", least)[0] == (mine[-1]["layer"], mine[-1]["head"])
