"""What the transformers-based evaluators share: importing torch and transformers (or saying what to
install), finding the model (a Hugging Face directory, a GGUF file, a PEFT adapter) and its tokenizer,
reading the text, and timing."""
from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from .errors import EvalError, MissingDependency

# Files that mark a tokenizer saved with a model (any one is enough for AutoTokenizer).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.txt", "vocab.json",
                   "spiece.model", "sentencepiece.bpe.model")

DTYPES = ("float32", "bfloat16", "float16")


def require(evaluator: str):
    """(torch, transformers), or MissingDependency naming what to install."""
    missing = []
    modules = []
    for name in ("torch", "transformers"):
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            missing.append(name)
    if missing:
        raise MissingDependency(f"{evaluator} needs {' and '.join(missing)}: pip install {' '.join(missing)}")
    return tuple(modules)


@dataclass(frozen=True)
class ModelSource:
    """What a model path holds: a Hugging Face directory ("hf"), a GGUF file ("gguf": `gguf_file` in
    `directory`, loaded by transformers with gguf_file=, dequantised) or a PEFT adapter directory
    ("adapter": merged into `base`, its base_model_name_or_path, with PEFT's merge_and_unload)."""
    kind: str
    directory: Path
    gguf_file: Optional[str] = None
    base: Optional[str] = None

    def __str__(self) -> str:
        return os.fspath(self.directory / self.gguf_file) if self.gguf_file else os.fspath(self.directory)


def model_source(model) -> ModelSource:
    """The ModelSource of `model`: a directory, a weights file in one (a reference point given as
    model.safetensors), a .gguf file, a directory holding one .gguf (a diffract edit of a GGUF), or an
    adapter directory. Anything else is an EvalError naming what was expected."""
    path = Path(model)
    if path.is_file():
        if path.suffix == ".gguf":
            return ModelSource("gguf", path.parent, path.name)
        path = path.parent
    if (path / "adapter_config.json").is_file():
        try:
            base = json.loads((path / "adapter_config.json").read_text(encoding="utf-8")).get("base_model_name_or_path")
        except (OSError, ValueError, AttributeError) as e:
            raise EvalError(f"{path / 'adapter_config.json'}: cannot read it ({e})") from None
        if not base:
            raise EvalError(f"{path / 'adapter_config.json'}: no base_model_name_or_path: the adapter's base "
                            "is unknown (merge it first: diffract edit merge-lora --base BASE)")
        return ModelSource("adapter", path, base=base)
    if (path / "config.json").is_file():
        return ModelSource("hf", path)
    ggufs = sorted(p.name for p in path.glob("*.gguf")) if path.is_dir() else []
    if len(ggufs) == 1:
        return ModelSource("gguf", path, ggufs[0])
    if len(ggufs) > 1:
        raise EvalError(f"{model}: {len(ggufs)} GGUF files ({', '.join(ggufs[:3])}); give the one to evaluate")
    raise EvalError(f"{model}: no config.json, .gguf file or adapter_config.json (expected a Hugging Face "
                    "model directory, a GGUF file or a PEFT adapter directory)")


def _require_module(name: str, what: str):
    try:
        return importlib.import_module(name)
    except ImportError:
        raise MissingDependency(f"{what} needs {name}: pip install {name}") from None


def load_tokenizer(transformers, source: ModelSource, tokenizer=None):
    """The tokenizer saved with the model (a GGUF's own; an adapter's, else its base's); else `tokenizer`
    (a directory or hub name); else EvalError."""
    if tokenizer is not None:
        return transformers.AutoTokenizer.from_pretrained(os.fspath(tokenizer))
    if source.kind == "gguf":
        _require_module("gguf", "a GGUF model")
        return transformers.AutoTokenizer.from_pretrained(os.fspath(source.directory), gguf_file=source.gguf_file)
    for where in (source.directory, Path(source.base) if source.base else None):
        if where is not None and any((where / f).is_file() for f in TOKENIZER_FILES):
            return transformers.AutoTokenizer.from_pretrained(os.fspath(where))
    raise EvalError(f"{source}: no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...); "
                    "pass --tokenizer DIR (the base model's directory, for instance)")


def load_model(torch, auto_class, source: ModelSource, dtype: str, device: str, what: str, unused=()):
    """The model in eval mode on `device`. A checkpoint without the head `what` needs (a sentence encoder
    saved without its masked-LM head, say) is refused: transformers would initialise the head at random,
    differently on each load, and the candidates' scores would not be comparable. Weights whose names
    start with one of `unused` (parts the evaluator does not read) may be missing."""
    kwargs = {"dtype": torch_dtype(torch, dtype), "output_loading_info": True}
    if source.kind == "gguf":
        _require_module("gguf", "a GGUF model")
        model, info = auto_class.from_pretrained(source.directory, gguf_file=source.gguf_file, **kwargs)
    elif source.kind == "adapter":
        peft = _require_module("peft", "a LoRA adapter")
        model, info = auto_class.from_pretrained(source.base, **kwargs)
        model = peft.PeftModel.from_pretrained(model, os.fspath(source.directory)).merge_and_unload()
    else:
        model, info = auto_class.from_pretrained(source.directory, **kwargs)
    missing = sorted(k for k in info.get("missing_keys") or () if not k.startswith(tuple(unused)))
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise EvalError(f"{source}: {len(missing)} weights of the {what} are not in the checkpoint ({shown}); "
                        "transformers would draw them at random")
    return model.eval().to(device)


def read_text(path) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise EvalError(f"{path}: cannot read the text ({e})") from None
    if not text.strip():
        raise EvalError(f"{path}: the text is empty")
    return text


def torch_dtype(torch, name: str):
    if name not in DTYPES:
        raise EvalError(f"--dtype: expected one of {', '.join(DTYPES)}, found '{name}'")
    return getattr(torch, name)


def context_length(config, override=None) -> int:
    """The longest window the model takes: `override`, else the config's position limit."""
    if override:
        return int(override)
    for key in ("n_positions", "max_position_embeddings", "n_ctx", "seq_length"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    raise EvalError("the model's config gives no context length; pass --max-length")
