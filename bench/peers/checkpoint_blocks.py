"""Reads the 2-D weight tensors of one safetensors checkpoint as numpy arrays, numpy only.

The peer runners import this in their own venvs (Python 3.12 for diffract-core, a torch venv for
WeightWatcher), which have neither our bindings nor the `safetensors` package; bf16 has no numpy dtype,
so it is widened here (exactly: a bf16 value is the top half of an f32).
"""
import json
import re
import struct
from pathlib import Path

import numpy as np

_DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64}


def _decode(raw, dtype, shape, out_dtype):
    if dtype == "BF16":
        wide = np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16
        values = wide.view(np.float32)
    elif dtype in _DTYPES:
        values = np.frombuffer(raw, dtype=_DTYPES[dtype])
    else:
        raise ValueError(f"dtype {dtype} not supported by the peer benchmark")
    return values.reshape(shape).astype(out_dtype)


def read_blocks(checkpoint, match, out_dtype=np.float64):
    """{name: 2-D array} for every 2-D tensor whose name matches the regex `match`, in file order."""
    files = sorted(Path(checkpoint).glob("*.safetensors")) if Path(checkpoint).is_dir() else [Path(checkpoint)]
    pattern = re.compile(match)
    blocks = {}
    for path in files:
        with open(path, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(header_len))
            base = 8 + header_len
            entries = sorted(
                ((n, e) for n, e in header.items() if n != "__metadata__"), key=lambda ne: ne[1]["data_offsets"][0]
            )
            for name, entry in entries:
                if len(entry["shape"]) != 2 or not pattern.search(name):
                    continue
                begin, end = entry["data_offsets"]
                f.seek(base + begin)
                blocks[name] = _decode(f.read(end - begin), entry["dtype"], entry["shape"], out_dtype)
    return blocks
