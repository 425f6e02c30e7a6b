# %% [markdown]
# # diffract in a notebook
#
# A walk through the Python bindings on the synthetic model family: generate it, open a checkpoint and
# look at its tensors (zero-copy numpy views), analyze the spectra, add a custom metric, compare the
# continued-pre-training models with the base and rank the attention heads. Every cell runs as plain
# Python too: `python examples/notebook_walkthrough.py [WORKDIR]`.

# %%
import sys
import tempfile
from pathlib import Path

import numpy as np

import diffract_spectral as diffract

work = Path(sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="diffract-"))
store = work / "results.sqlite"  # every result is kept here; re-running a cell recomputes nothing

# %% [markdown]
# ## 1. A model family
# `diffract.generate` writes the same family as `diffract generate`: a pre-trained model, one
# continued-pre-training model per domain (math, code) with planted head rotations, and a reference
# model (text) with generic drift only.

# %%
family = Path(diffract.generate(out=work / "family", dtype="F32", layers=2, hidden=128, heads=4, intermediate=256,
                                 vocab=512, domain_heads=1, generic_heads=1))
print(sorted(p.name for p in family.iterdir()))

# %% [markdown]
# ## 2. Open a checkpoint; tensors are read-only views of the mapped file

# %%
pre = diffract.open(family / "pretrained")
print(pre)
q = pre["model.layers.0.self_attn.q_proj.weight"]
print(q.dtype, q.shape, "writeable:", q.flags.writeable)
print("largest singular value (numpy):", np.linalg.svd(q.astype(np.float64), compute_uv=False)[0])

# %% [markdown]
# ## 3. Analyze: one row per matrix and per attention head

# %%
analysis = diffract.analyze([pre, family / "math"], metrics="default", store=store)
metrics = analysis.metrics  # a pandas DataFrame (a dict of lists without pandas)
print(f"{analysis.computed} computed, {analysis.reused} reused")
print(analysis.aggregates)

# %% [markdown]
# ## 4. A custom metric: declared inputs, computed by the engine, stored like any field

# %%
@diffract.metric(needs=["weights_svals"])
def top3_energy(svals):
    """Share of the squared spectrum in the three largest singular values."""
    return float((svals[-3:] ** 2).sum() / (svals**2).sum())


custom = diffract.analyze(family / "math", metrics=["l2_norm", top3_energy], heads=False, store=store)
print(custom.metrics[["tensor", "l2_norm", "top3_energy"]].head() if hasattr(custom.metrics, "head")
      else custom.metrics["top3_energy"][:5])

# %% [markdown]
# ## 5. In-memory models: a dict of numpy arrays (or a PyTorch state_dict)

# %%
rng = np.random.default_rng(0)
toy = {"layer.weight": rng.standard_normal((64, 32)).astype(np.float32)}
toy_metrics = diffract.analyze(toy, metrics="l2_norm", store=store).metrics
print("engine vs numpy:", toy_metrics["l2_norm"][0], np.linalg.svd(toy["layer.weight"], compute_uv=False)[0])

# %% [markdown]
# ## 6. Compare with the base; which heads changed most?

# %%
comparison = diffract.compare([family / "math", family / "code"], base=family / "pretrained", reference=family / "text",
                              store=store)
heads = comparison.heads
if hasattr(heads, "sort_values"):
    top = heads.sort_values("rank", ascending=False).groupby("model").head(2)
    print("most changed heads:\n", top[["model", "layer", "head", "importance", "rank"]].to_string(index=False))
else:
    print("most changed heads:", list(zip(heads["model"], heads["layer"], heads["head"], heads["rank"]))[:4])

# %% [markdown]
# ## 7. Edit: halfway between the base and the math model
# Arguments follow the CLI (`diffract edit interpolate A B --omega 0.5 --out DIR`); progress=True shows a
# tqdm bar (lines on stderr without tqdm).

# %%
halfway = work / "halfway"
if not halfway.exists():
    diffract.edit.interpolate(family / "pretrained", family / "math", omega=0.5, out=halfway, progress=True)
print("halfway:", diffract.open(halfway))

# %% [markdown]
# ## 8. Summary (no plots needed)

# %%
whole = comparison.matrices
if hasattr(whole, "groupby"):
    print(whole[whole["head"].isna()].groupby("model")["rel_delta_frob_norm"].mean())
diffract.unregister_metric(top3_energy)
