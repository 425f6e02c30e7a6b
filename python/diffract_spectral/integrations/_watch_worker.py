"""The background process of the Trainer callback: one `watch` over the run directory (every checkpoint
saved so far; the store makes the ones seen before free), at the lowest CPU priority, then the per-step
scalars written atomically to SCALARS (JSON: {"<step>": {"diffract/...": value}}).

Run as `python -m diffract_spectral.integrations._watch_worker REQUEST.json`."""
import json
import math
import os
import sys


def scalars(w) -> dict:
    """Per step: the mean pl_alpha and stable rank of each layer's whole matrices, and with a base the
    largest relative head update (heads.csv's relative_update)."""
    out = {}
    m = w.metrics
    if len(m):
        whole = m[m["head"].isna()]
        for (step, layer), g in whole.groupby(["step", "layer"]):
            s = out.setdefault(str(int(step)), {})
            for field, name in (("pl_alpha", "alpha"), ("stable_rank", "stable_rank")):
                if field in g:
                    v = float(g[field].mean())
                    if math.isfinite(v):
                        s[f"diffract/{name}/layer_{int(layer)}"] = v
    h = w.heads
    if len(h):
        for step, g in h.groupby("step"):
            v = float(g["relative_update"].max())
            if math.isfinite(v):
                out.setdefault(str(int(step)), {})["diffract/max_head_delta"] = v
    return out


def main(request_path: str) -> int:
    with open(request_path) as f:
        req = json.load(f)
    # Training keeps the CPU: the analysis takes what is left. SCHED_IDLE runs only on an otherwise idle
    # core (nice 19 alone still takes time slices from training threads that wait on each other).
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass
    import diffract_spectral as diffract

    w = diffract.watch(req["run_dir"], **req["options"])
    tmp = req["scalars"] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(scalars(w), f)
    os.replace(tmp, req["scalars"])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
