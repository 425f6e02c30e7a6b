"""A small writer of torch.save archives without torch: Python's zipfile + pickle laid out as torch
(>= 1.6) lays them out, for the interop and malformed-file tests.

  <folder>/data.pkl      protocol-2 pickle; tensors reduce to torch._utils._rebuild_tensor_v2(storage,
                         offset, size, stride, requires_grad, OrderedDict()) and storages are
                         persistent ids ('storage', torch.<T>Storage, key, 'cpu', numel)
  <folder>/byteorder     "little"
  <folder>/data/<key>    the storage bytes, STORED, data aligned to 64 bytes (torch pads the local
                         header's extra field)
  <folder>/version       "3\\n"
"""
import collections
import contextlib
import io
import pickle
import struct
import sys
import types
import zipfile

import numpy as np

STORAGE = {np.dtype("float32"): "FloatStorage", np.dtype("float64"): "DoubleStorage",
           np.dtype("float16"): "HalfStorage", np.dtype("int64"): "LongStorage", np.dtype("int32"): "IntStorage",
           np.dtype("int16"): "ShortStorage", np.dtype("int8"): "CharStorage", np.dtype("uint8"): "ByteStorage",
           np.dtype("bool"): "BoolStorage"}


_NAMED = {}


class _Named:
    """Pickles as GLOBAL module.name; nothing of torch is imported (see pickle_bytes)."""

    def __init__(self, module, name):
        self.__module__ = module
        self.__qualname__ = self.__name__ = name

    def __reduce__(self):
        return self.__qualname__

    def __call__(self, *args):  # pickle requires reduce functions to be callable; never called
        raise RuntimeError("a stand-in for a torch global")


def _global(module, name):
    return _NAMED.setdefault((module, name), _Named(module, name))


@contextlib.contextmanager
def _fake_modules():
    """pickle looks globals up in sys.modules: stand-in modules for the dump only (a real torch, if
    imported, is put back afterwards)."""
    saved = {}
    for (module, name), obj in _NAMED.items():
        parts = module.split(".")
        for i in range(1, len(parts) + 1):
            m = ".".join(parts[:i])
            if m not in saved:
                saved[m] = sys.modules.get(m)
                sys.modules[m] = types.ModuleType(m)
        setattr(sys.modules[module], name, obj)
    try:
        yield
    finally:
        for module, old in saved.items():
            if old is None:
                del sys.modules[module]
            else:
                sys.modules[module] = old


class Storage:
    def __init__(self, key, data: bytes, storage_class, numel):
        self.key, self.data, self.storage_class, self.numel = key, data, storage_class, numel


class Tensor:
    """_rebuild_tensor_v2 (or _v3 with `dtype`) of a storage view."""

    def __init__(self, storage, shape, stride, offset=0, v3_dtype=None, parameter=False):
        self.storage, self.shape, self.stride, self.offset = storage, tuple(shape), tuple(stride), offset
        self.v3_dtype, self.parameter = v3_dtype, parameter

    def __reduce__(self):
        hooks = collections.OrderedDict()
        if self.v3_dtype is not None:
            call = (_global("torch._utils", "_rebuild_tensor_v3"),
                    (self.storage, self.offset, self.shape, self.stride, False, hooks,
                     _global("torch", self.v3_dtype)))
        else:
            call = (_global("torch._utils", "_rebuild_tensor_v2"),
                    (self.storage, self.offset, self.shape, self.stride, False, hooks))
        if self.parameter:
            return (_global("torch._utils", "_rebuild_parameter"), (_Reduced(call), False, collections.OrderedDict()))
        return call


class _Reduced:
    def __init__(self, call):
        self.call = call

    def __reduce__(self):
        return self.call


class Raw:
    """Any reduce value (for hostile pickles: os.system, builtins.eval)."""

    def __init__(self, module, name, args):
        self.module, self.name, self.args = module, name, args

    def __reduce__(self):
        return (_global(self.module, self.name), self.args)


class _Pickler(pickle.Pickler):
    def persistent_id(self, obj):
        if isinstance(obj, Storage):
            return ("storage", _global("torch", obj.storage_class), obj.key, "cpu", obj.numel)
        return None


def tensor_of(array, key, storages):
    """A contiguous tensor over a fresh storage holding `array` (row-major, little-endian)."""
    a = np.ascontiguousarray(array)
    s = Storage(key, a.astype(a.dtype.newbyteorder("<")).tobytes(), STORAGE[a.dtype], a.size)
    storages.append(s)
    stride, acc = [], 1
    for d in reversed(a.shape):
        stride.insert(0, acc)
        acc *= d
    return Tensor(s, a.shape, stride)


def state_dict(arrays):
    """OrderedDict name -> Tensor and the storages, one per array."""
    storages, sd = [], collections.OrderedDict()
    for i, (name, a) in enumerate(arrays.items()):
        sd[name] = tensor_of(a, str(i), storages)
    return sd, storages


def pickle_bytes(obj, protocol=2):
    _collect(obj)
    buf = io.BytesIO()
    with _fake_modules():
        _Pickler(buf, protocol=protocol).dump(obj)
    return buf.getvalue()


def _collect(obj, depth=0):
    """Creates the stand-ins every reduce of `obj` will name before the modules are faked."""
    if depth > 20:
        return
    if isinstance(obj, (Tensor, Raw, _Reduced)):
        obj.__reduce__()
        if isinstance(obj, Tensor):
            _collect(obj.storage, depth + 1)
            if obj.parameter:
                _collect(obj.__reduce__()[1][0], depth + 1)
    elif isinstance(obj, Storage):
        _global("torch", obj.storage_class)
    elif isinstance(obj, dict):
        for v in obj.values():
            _collect(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            _collect(v, depth + 1)


def _aligned(zf, name, data, compress=zipfile.ZIP_STORED):
    """Writes an entry whose data starts at a multiple of 64, as torch's writer does (padding in extra)."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = compress
    header = 30 + len(name.encode())
    offset = zf.fp.tell()
    pad = (-(offset + header + 4)) % 64
    info.extra = struct.pack("<HH", 0x4246, pad) + b"Z" * pad  # "FB" padding field, as torch
    zf.writestr(info, data)


def write(path, obj, storages, folder="archive", byteorder=b"little", pickled=None, compress_data=False,
          skip_keys=()):
    """Writes `obj` (with its storages) as torch.save would; `pickled` overrides data.pkl's bytes."""
    data = pickled if pickled is not None else pickle_bytes(obj)
    with zipfile.ZipFile(path, "w") as zf:
        _aligned(zf, f"{folder}/data.pkl", data)
        if byteorder is not None:
            _aligned(zf, f"{folder}/byteorder", byteorder)
        seen = set()
        for s in sorted(storages, key=lambda s: s.key):
            if s.key in seen or s.key in skip_keys:
                continue
            seen.add(s.key)
            _aligned(zf, f"{folder}/data/{s.key}", s.data,
                     zipfile.ZIP_DEFLATED if compress_data else zipfile.ZIP_STORED)
        _aligned(zf, f"{folder}/version", b"3\n")
        _aligned(zf, f"{folder}/.data/serialization_id", b"1234567890")
    return path


def save(path, arrays, **kw):
    sd, storages = state_dict(arrays)
    return write(path, sd, storages, **kw)


def with_zip64_end(raw: bytes, saturate=True) -> bytes:
    """The archive `raw` with a zip64 end-of-central-directory record and locator before its end record
    (as writers of archives over 4 GiB or 65535 entries add them); `saturate` sets the 32-bit fields
    of the end record to their zip64 markers."""
    at = raw.rindex(b"PK\x05\x06")
    entries, cd_size, cd_offset = struct.unpack("<HII", raw[at + 10:at + 20])
    rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, entries, entries, cd_size, cd_offset)
    locator = struct.pack("<IIQI", 0x07064B50, 0, at, 1)
    end = bytearray(raw[at:])
    if saturate:
        end[8:20] = struct.pack("<HHII", 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    return raw[:at] + rec + locator + bytes(end)
