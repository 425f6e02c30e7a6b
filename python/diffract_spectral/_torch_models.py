"""Model objects as checkpoints: a transformers PreTrainedModel, a PEFT model, any torch nn.Module.

Their tensors are read in place (torch CPU tensors share their memory with the numpy views the engine
reads; from_arrays keeps them alive): a model is never saved to disk. Only what has no tensor of its
own is computed: a PEFT LoRA layer's effective weight W + scaling·B·A (PEFT's get_delta_weight), as
`diffract analyze BASE+ADAPTER` and merge_and_unload see it. Neither torch, transformers nor peft is
imported here: the objects are recognised by the methods they have.
"""
from __future__ import annotations

from typing import Any, Optional


def is_model_object(obj: Any) -> bool:
    """A torch nn.Module (transformers and PEFT models are ones): has state_dict() and named_modules()."""
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "named_modules", None))


def _is_peft(model: Any) -> bool:
    return hasattr(model, "peft_config") and callable(getattr(model, "get_base_model", None))


def _config_of(model: Any) -> Optional[dict]:
    """The HF config as a dict (head geometry for per-head rows), with `architectures` naming the
    class when the config was built in memory (from_config leaves it empty)."""
    config = getattr(model, "config", None)
    if config is None or not callable(getattr(config, "to_dict", None)):
        return None
    d = dict(config.to_dict())
    if not d.get("architectures"):
        d["architectures"] = [type(model).__name__]
    return d


def _name_of(model: Any) -> str:
    config = getattr(model, "config", None)
    path = getattr(config, "_name_or_path", "") or getattr(config, "name_or_path", "")
    return str(path).rstrip("/").split("/")[-1] if path else type(model).__name__


def _lora_weights(base: Any) -> dict:
    """{HF tensor name: effective weight} for every LoRA layer of a PEFT base model that is not merged."""
    out = {}
    for name, module in base.named_modules():
        if not (hasattr(module, "base_layer") and callable(getattr(module, "get_delta_weight", None))):
            continue
        if getattr(module, "merged", False):
            continue  # the delta is already in base_layer.weight
        adapters = [a for a in getattr(module, "active_adapters", ()) if a in getattr(module, "lora_A", {})]
        if not adapters:
            continue
        weight = module.base_layer.weight
        delta = None
        for a in adapters:
            d = module.get_delta_weight(a)
            delta = d if delta is None else delta + d
        if hasattr(delta, "to"):  # torch: the delta in the weight's dtype, detached from autograd
            delta = delta.to(weight.dtype)
        merged = weight + delta
        out[f"{name}.weight"] = merged.detach() if hasattr(merged, "detach") else merged
    return out


def _without_tied_copies(state: dict, model: Any) -> dict:
    """Drops the second name of a tensor shared by two (tied embeddings: lm_head.weight), as
    save_pretrained does, so that the rows equal those of the saved checkpoint."""
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    seen: dict = {}
    for key, t in state.items():
        ptr = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype)) if hasattr(t, "data_ptr") else None
        if ptr is None or ptr not in seen:
            if ptr is not None:
                seen[ptr] = key
            continue
        first = seen[ptr]
        # keep the name save_pretrained keeps: the one not listed as tied
        if first in tied and key not in tied:
            seen[ptr] = key
    keep = set(seen.values())
    return {k: v for k, v in state.items() if not hasattr(v, "data_ptr") or k in keep}


def model_state(model: Any) -> tuple:
    """(name, {tensor name: tensor}, config dict or None) of a model object."""
    if _is_peft(model):
        base = model.get_base_model()
        merged = _lora_weights(base)
        state = {}
        for key, t in base.state_dict().items():
            if ".lora_" in key:
                continue
            key = key.replace(".base_layer.", ".")
            state[key] = merged.get(key, t)
        return _name_of(base), _without_tied_copies(state, base), _config_of(base)
    return _name_of(model), _without_tied_copies(dict(model.state_dict()), model), _config_of(model)
