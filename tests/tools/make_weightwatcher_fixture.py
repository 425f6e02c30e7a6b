"""Makes tests/fixtures/weightwatcher/details.csv: WeightWatcher's analyze() columns on the matrices of
tests/fixtures/weightwatcher/matrices.py, each the weight of one torch Linear layer.

Run once with an environment that has torch and weightwatcher (here /opt/torchenv):
    /opt/torchenv/bin/python tests/tools/make_weightwatcher_fixture.py [OUT.csv]
The CSV is committed; tests/python/test_weightwatcher.py compares `analyze --convention weightwatcher`
with it using numpy only.
"""
import contextlib
import io
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures" / "weightwatcher"))

import torch  # noqa: E402
import weightwatcher as ww  # noqa: E402

from matrices import matrices  # noqa: E402


def main():
    logging.disable(logging.WARNING)
    mats = matrices()
    layers = []
    for _, w in mats:
        lin = torch.nn.Linear(w.shape[1], w.shape[0], bias=False)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(w))
        layers.append(lin)
    model = torch.nn.Sequential(*layers)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        details = ww.WeightWatcher(model=model).analyze()
    details = details.sort_values("layer_id").reset_index(drop=True)
    assert len(details) == len(mats)
    details.insert(1, "matrix", [name for name, _ in mats])
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "fixtures" / "weightwatcher" / "details.csv"
    details.to_csv(out, index=False, float_format="%.17g")
    print(f"wrote {out} (weightwatcher {ww.__version__}, torch {torch.__version__})")


if __name__ == "__main__":
    main()
