"""What the transformers-based evaluators share: importing torch and transformers (or saying what to
install), finding the model directory and its tokenizer, reading the text, and timing."""
from __future__ import annotations

import importlib
import os
from pathlib import Path

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


def model_directory(model) -> Path:
    """The HF model directory: `model` itself, or the directory of a weights file (a reference point
    given as model.safetensors)."""
    path = Path(model)
    if path.is_file():
        path = path.parent
    if not (path / "config.json").is_file():
        raise EvalError(f"{model}: no config.json (expected a Hugging Face model directory)")
    return path


def load_tokenizer(transformers, model_dir: Path, tokenizer=None):
    """The tokenizer saved with the model; else `tokenizer` (a directory or hub name); else EvalError."""
    source = tokenizer
    if source is None:
        if not any((model_dir / f).is_file() for f in TOKENIZER_FILES):
            raise EvalError(f"{model_dir}: no tokenizer files ({', '.join(TOKENIZER_FILES[:4])}, ...); "
                            "pass --tokenizer DIR (the base model's directory, for instance)")
        source = model_dir
    return transformers.AutoTokenizer.from_pretrained(os.fspath(source))


def load_model(torch, auto_class, model_dir: Path, dtype: str, device: str, what: str, unused=()):
    """The model in eval mode on `device`. A checkpoint without the head `what` needs (a sentence encoder
    saved without its masked-LM head, say) is refused: transformers would initialise the head at random,
    differently on each load, and the candidates' scores would not be comparable. Weights whose names
    start with one of `unused` (parts the evaluator does not read) may be missing."""
    model, info = auto_class.from_pretrained(model_dir, dtype=torch_dtype(torch, dtype), output_loading_info=True)
    missing = sorted(k for k in info.get("missing_keys") or () if not k.startswith(tuple(unused)))
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise EvalError(f"{model_dir}: {len(missing)} weights of the {what} are not in the checkpoint ({shown}); "
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
