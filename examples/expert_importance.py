# %% [markdown]
# # Which experts did adaptation change?
#
# The paper's head analysis with the experts of a mixture of experts as the units (compare's
# experts.csv, docs/formats/moe.md). The model is a tiny Qwen3-MoE in the packed layout transformers
# writes (tests/fixtures/transformers/qwen3_moe_packed, materialized with seeded values); a "continued"
# copy moves expert 3
# of every layer a lot and the rest a little, and a reference copy moves everything a little. Runs as
# plain Python: `python examples/expert_importance.py [WORKDIR]`.

# %%
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

import diffract_spectral as diffract

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "transformers"))
from materialize import materialize  # noqa: E402

work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="diffract-moe-"))
store = work / "results.sqlite"
source = materialize("qwen3_moe_packed", work / "base")

# %% [markdown]
# ## 1. A base, a continued model and a reference
# Packed experts are [E, ...] tensors: expert e is slice e. The router (`mlp.gate`) moves too.

# %%
rng = np.random.default_rng(0)
base = load_file(str(source / "model.safetensors"))


def variant(name, planted_scale):
    out = work / name
    shutil.copytree(source, out, dirs_exist_ok=True)
    w = {}
    for k, v in base.items():
        noise = 0.002 * rng.standard_normal(v.shape)
        if k.endswith(("experts.gate_up_proj", "experts.down_proj")):
            noise[3] *= planted_scale / 0.002  # expert 3
        w[k] = (v + noise).astype(v.dtype)
    save_file(w, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


cpt, reference = variant("cpt", 0.05), variant("reference", 0.002)

# %% [markdown]
# ## 2. The expert ranking
# `rank` 1 is the most important expert of its model and kind; `stands_out` is the heads' noise floor.

# %%
result = diffract.compare(cpt, base=source, reference=reference, store=store)
experts = result.experts
print(experts.sort_values("rank")[["layer", "expert", "update_norm", "importance", "rank", "stands_out",
                                   "router_update_norm", "router_angle_degrees"]].head(6).to_string(index=False))
top = sorted({int(e) for e in experts[experts["stands_out"] == 1]["expert"]})
print("experts standing out:", top)

# %% [markdown]
# ## 3. The spectra of those experts alone
# `experts=` selects like `layers=`; `component=` would select a tower of a multimodal model.

# %%
spectra = diffract.analyze(cpt, experts=top, store=store)
print(spectra.metrics.groupby(["layer", "expert", "role"])["stable_rank"].first().to_string())
