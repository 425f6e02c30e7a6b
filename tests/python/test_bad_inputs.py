"""Issue 13 §4: every bad input is exit 2 and one line naming the file (and the tensor where there is
one), for every command that reads it; nothing is written. Classes: FIFOs and devices as inputs,
the geometry rule of config.json and GGUF metadata, the --heads file of rewind, grid and sweep sizes,
unsupported GGUF types, non-UTF-8 names in JSON outputs, --device when every result is stored."""
import json
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import binary, run


@pytest.fixture(scope="module")
def fam(tmp_path_factory):
    out = tmp_path_factory.mktemp("bad") / "fam"
    run(["generate", "--out", out, "--dtype", "F32", "--layers", "2", "--hidden", "64", "--heads", "4",
         "--intermediate", "128", "--vocab", "128", "--domain-heads", "1", "--generic-heads", "1"])
    return out


def run_bytes(args, cwd=None):
    """Runs the CLI with bytes arguments and output (paths that are not UTF-8)."""
    return subprocess.run([os.fsencode(binary()), *[a if isinstance(a, bytes) else os.fsencode(str(a)) for a in args]],
                          capture_output=True, timeout=120, cwd=cwd)


def fails(args, *needles, timeout=60):
    """Asserts exit 2 with one stderr line holding each needle; returns that line."""
    p = run(args, check=False, timeout=timeout)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, (args, p.returncode, p.stderr)
    assert len(lines) == 1 and lines[0].startswith("diffract: error: "), p.stderr
    for n in needles:
        assert str(n) in lines[0], (n, lines[0])
    return lines[0]


def copy_model(fam, tmp_path, name="m"):
    d = tmp_path / name
    shutil.copytree(fam / "code", d)
    return d


def set_config(d, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


# ---- FIFOs, sockets and devices are refused, never read (a FIFO would block forever) --------------

def model_commands(path, fam, out):
    base = fam / "pretrained"
    return {
        "inspect": ["inspect", path],
        "analyze": ["analyze", path, "--out", out / "a", "--quiet"],
        "compare-model": ["compare", "--base", base, path, "--out", out / "c", "--quiet"],
        "compare-base": ["compare", "--base", path, base, "--out", out / "c", "--quiet"],
        "rewind": ["edit", "rewind", "--base", base, "--model", path, "--fraction", "0.5", "--out", out / "e"],
        "truncate": ["edit", "truncate", "--base", path, "--model", base, "--keep", "0.5", "--out", out / "e"],
        "transplant": ["edit", "transplant", "--base", base, "--model", path, "--out", out / "e"],
        "permute": ["edit", "permute", "--model", path, "--out", out / "e"],
        "interpolate": ["edit", "interpolate", base, path, "--omega", "0.5", "--out", out / "e"],
        "merge": ["edit", "merge", "--base", base, "--models", path, "--out", out / "e"],
        "sweep": ["sweep", "truncate", "--base", base, "--model", path, "--eval", "echo 1", "--out", out / "s"],
    }


@pytest.mark.parametrize("command", list(model_commands("x", Path("f"), Path("o"))))
def test_fifo_as_model_path_is_refused_by_every_command(fam, tmp_path, command):
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    fails(model_commands(fifo, fam, out)[command], fifo, "not a regular file or directory (found a FIFO)", timeout=30)
    assert not any(out.iterdir())


@pytest.mark.parametrize("inner", ["model.safetensors", "config.json", "model.safetensors.index.json"])
def test_fifo_inside_a_model_directory_is_refused(fam, tmp_path, inner):
    d = copy_model(fam, tmp_path)
    (d / inner).unlink(missing_ok=True)
    os.mkfifo(d / inner)
    fails(["inspect", d], d / inner, "not a regular file", timeout=30)


def test_device_as_model_path_is_refused(tmp_path):
    fails(["inspect", "/dev/null"], "/dev/null", "found a character device", timeout=30)
    fails(["analyze", "/dev/zero", "--out", tmp_path / "a"], "/dev/zero", "found a character device", timeout=30)


# ---- config.json: one rule for every geometry key --------------------------------------------------

GEOMETRY_KEYS = ["num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "num_kv_heads", "head_dim",
                 "hidden_size", "n_embd", "num_hidden_layers", "intermediate_size"]
BAD_VALUES = [0, -4, 2.5, 4.0, "4", True, False, 10**12, [4], {"n": 4}]


@pytest.mark.parametrize("key", GEOMETRY_KEYS)
def test_every_geometry_key_must_be_a_positive_integer(fam, tmp_path, key):
    d = copy_model(fam, tmp_path)
    for bad in BAD_VALUES:
        set_config(d, **{key: bad})
        fails(["inspect", d], d / "config.json", f"key '{key}'", "positive integer")
    # The same config is refused by the commands that only read it on the way.
    set_config(d, **{key: 0})
    fails(["analyze", d, "--out", tmp_path / "a", "--quiet"], d / "config.json", f"key '{key}'")
    fails(["edit", "permute", "--model", d, "--out", tmp_path / "p"], d / "config.json", f"key '{key}'")
    assert not (tmp_path / "p").exists()


def test_geometry_aliases_agree_and_counts_match_the_tensors(fam, tmp_path):
    d = copy_model(fam, tmp_path)
    set_config(d, n_head=2)  # num_attention_heads is 4
    fails(["inspect", d], d / "config.json", "contradicts")
    set_config(d, n_head=None, num_key_value_heads=3)
    fails(["inspect", d], d / "config.json", "not a multiple of num_key_value_heads 3")
    set_config(d, num_key_value_heads=4, head_dim=8)  # 4 heads x 8 rows, but q_proj has 64 rows
    fails(["inspect", d], d / "model.safetensors", "tensor 'model.layers.0.self_attn.q_proj.weight'")
    set_config(d, head_dim=16, hidden_size=32)  # q_proj reads 64 columns
    fails(["inspect", d], d / "model.safetensors", "tensor 'model.layers.0.self_attn.q_proj.weight'", "hidden_size")
    set_config(d, hidden_size=64, num_hidden_layers=1)  # layer 1 exists
    fails(["inspect", d], d / "model.safetensors", "tensor 'model.layers.1.", "num_hidden_layers")
    set_config(d, num_hidden_layers=2, head_dim=None)
    run(["inspect", d])


@pytest.mark.parametrize("text,found", [("[1, 2]", "found array"), ('"llama"', "found string"), ("4", "found number"),
                                        ("null", "found null")])
def test_config_that_is_not_an_object_names_config_json(fam, tmp_path, text, found):
    d = copy_model(fam, tmp_path)
    (d / "config.json").write_text(text)
    fails(["inspect", d], d / "config.json", "config is not a JSON object", found)


# ---- GGUF: the same rule for the metadata; unsupported types never give an empty success ----------

def write_gguf(path, tensors, kvs):
    """A GGUF v3 file: kvs [(key, str | int as UINT32 | float as FLOAT32)], tensors [(name, ne, ggml type)]."""
    blocks = {0: (1, 4), 9: (32, 36), 15: (256, 292)}  # F32, Q8_1, Q8_K: (block size, bytes per block)

    def s(x):
        b = x.encode()
        return struct.pack("<Q", len(b)) + b

    def value(v):
        if isinstance(v, str):
            return struct.pack("<I", 8) + s(v)
        if isinstance(v, float):
            return struct.pack("<If", 6, v)
        return struct.pack("<II", 4, v)

    kv = b"".join(s(k) + value(v) for k, v in kvs)
    info, off = b"", 0
    for name, ne, typ in tensors:
        bs, ts = blocks[typ]
        info += s(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        info += struct.pack("<IQ", typ, off)
        off += (ne[0] * ne[1] // bs * ts + 31) // 32 * 32
    head = struct.pack("<IIQQ", 0x46554747, 3, len(tensors), len(kvs)) + kv + info
    path.write_bytes(head + b"\0" * (-len(head) % 32) + bytes(off))


LLAMA_META = [("general.architecture", "llama"), ("llama.attention.head_count", 4),
              ("llama.attention.head_count_kv", 4), ("llama.embedding_length", 256), ("llama.block_count", 1)]


@pytest.mark.parametrize("key", ["attention.head_count", "attention.head_count_kv", "embedding_length",
                                 "attention.key_length", "block_count"])
@pytest.mark.parametrize("bad", [0, 2.5, "4"])
def test_gguf_geometry_metadata_follows_the_rule(tmp_path, key, bad):
    meta = [kv for kv in LLAMA_META if kv[0] != "llama." + key] + [("llama." + key, bad)]
    f = tmp_path / "m.gguf"
    write_gguf(f, [("blk.0.attn_q.weight", [256, 256], 0)], meta)
    fails(["inspect", f], f, f"metadata key 'llama.{key}'", "positive integer")


@pytest.mark.parametrize("ggml_type,name", [(9, "Q8_1"), (15, "Q8_K")])  # not decoded (gguf-py cannot either)
def test_gguf_of_only_unsupported_types_is_an_error_naming_the_type(tmp_path, ggml_type, name):
    f = tmp_path / "q.gguf"
    write_gguf(f, [("blk.0.attn_q.weight", [256, 256], ggml_type), ("blk.0.ffn_up.weight", [256, 512], ggml_type)],
               LLAMA_META)
    assert run(["inspect", f, "--json"]).returncode == 0  # listing is fine
    fails(["analyze", f, "--out", tmp_path / "a", "--quiet"], f, "tensor 'blk.0.attn_q.weight'", f"ggml type {name}")
    fails(["analyze", f, "--out", tmp_path / "a", "--quiet", "--roles", "mlp_up"], "tensor 'blk.0.ffn_up.weight'", name)
    fails(["compare", "--base", f, f, "--out", tmp_path / "c", "--quiet"], f, name)
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()


# ---- rewind --heads FILE ----------------------------------------------------------------------------

@pytest.mark.parametrize("content,needles", [
    (b"layer,head\n7,1\n", ["line 2", "layer 7 has no attention projections"]),
    (b"layer,head\n0,4\n", ["line 2", "head 4 of layer 0 does not exist"]),
    (b"layer,head\n0,1.5\n", ["line 2", "expected 'layer,head'"]),
    (b"0,1\n1,2\n0,1\n", ["line 3", "listed twice (first on line 1)"]),
    (b"0,-1\n", ["line 1"]),
    (b"0,1e0\n", ["line 1"]),
    (b"heads\n0,1\n", ["line 1", "expected the header"]),
    (b"", ["lists no heads"]),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00\n\x00\x00\x03\x00>\x00", ["line 1", "\\x7f"]),
    (bytes(range(256)) * 4, ["line 1"]),
])
def test_heads_file_is_validated_strictly(fam, tmp_path, content, needles):
    h = tmp_path / "heads.csv"
    h.write_bytes(content)
    out = tmp_path / "out"
    fails(["edit", "rewind", "--base", fam / "pretrained", "--model", fam / "code", "--heads", h, "--out", out],
          h, *needles)
    assert not out.exists()


def test_heads_file_layers_outside_the_selection_and_fifos_are_refused(fam, tmp_path):
    h = tmp_path / "heads.csv"
    h.write_text("layer,head\n1,0\n")
    args = ["edit", "rewind", "--base", fam / "pretrained", "--model", fam / "code", "--out", tmp_path / "o"]
    fails(args + ["--heads", h, "--layers", "0"], h, "line 2", "layer 1 is not selected")
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    fails(args + ["--heads", fifo], fifo, "not a regular file", timeout=30)
    # What rewind writes reads back as a heads file.
    run(args + ["--heads", h, "--quiet"])
    run(["edit", "rewind", "--base", fam / "pretrained", "--model", fam / "code", "--out", tmp_path / "o2",
         "--heads", tmp_path / "o" / "rewound_heads.csv", "--quiet"])
    assert (tmp_path / "o2" / "rewound_heads.csv").read_text() == (tmp_path / "o" / "rewound_heads.csv").read_text()


# ---- grids and sweeps have a size limit ------------------------------------------------------------

def test_edit_and_sweep_grids_are_limited(fam, tmp_path):
    base, cpt = fam / "pretrained", fam / "code"
    out = tmp_path / "o"
    common = ["--eval", "echo 1", "--out", out, "--quiet"]
    fails(["edit", "interpolate", base, cpt, "--grid", "0:1:1e-9", "--out", out], "--grid '0:1:1e-9'",
          "1000000001 candidates", "--max-candidates", timeout=20)
    fails(["edit", "interpolate", base, cpt, "--grid", "0:1:1e-300", "--out", out], "--grid", timeout=20)
    fails(["edit", "interpolate", base, cpt, "--grid", "0:1:0.5", "--max-candidates", "2", "--out", out],
          "3 candidates", "at most 2")
    fails(["edit", "interpolate", base, cpt, "--grid", "0:1:0.5", "--max-candidates", "0", "--out", out],
          "--max-candidates")
    fails(["sweep", "truncate", "--base", base, "--model", cpt, "--keeps", "0:1:1e-7", *common], "--keeps", timeout=20)
    fails(["sweep", "interpolate", base, cpt, "--omegas", ",".join(["0.5"] * 1001), *common], "--omegas")
    fails(["sweep", "rewind", "--base", base, "--model", cpt, "--fractions", "0:1:1e-8", *common], "--fractions",
          timeout=20)
    fails(["sweep", "rewind", "--base", base, "--model", cpt, "--seeds", "1000000000", *common], "sweep rewind",
          "--max-candidates", timeout=20)
    fails(["sweep", "rewind-each", "--base", base, "--model", cpt, "--max-candidates", "3", *common], "sweep: 9 candidates")
    assert not out.exists() or not any((out).glob("*candidates*"))
    # Raising the limit lets the same grid through.
    run(["edit", "interpolate", base, cpt, "--grid", "0:1:0.5", "--max-candidates", "3", "--out", tmp_path / "g",
         "--quiet"])
    assert len(list((tmp_path / "g").glob("omega_*"))) == 3


# ---- non-UTF-8 names in every JSON output ------------------------------------------------------------

def test_non_utf8_paths_in_json_outputs(fam, tmp_path):
    d = os.fsencode(tmp_path) + b"/caf\xe9"
    shutil.copytree(fam / "code", os.fsdecode(d))
    p = run_bytes(["inspect", d, "--json"])
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["path"].endswith("caf\ufffd") and info["model"] == "caf\ufffd"
    store = tmp_path / "s.sqlite"
    p = run_bytes(["analyze", d, "--out", tmp_path / "a", "--quiet", "--store", store])
    assert p.returncode == 0, p.stderr
    p = run_bytes(["export", "--store", store, "--format", "jsonl"])
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert rows and {r["model"] for r in rows} == {"caf\ufffd"}
    # A sweep's journal and summary (its fingerprint names the inputs), and its resume.
    sweep = ["sweep", "interpolate", fam / "pretrained", d, "--omegas", "0,1", "--eval", "echo 1",
             "--out", tmp_path / "s", "--quiet"]
    for _ in range(2):
        p = run_bytes(sweep)
        assert p.returncode == 0, p.stderr
    for line in (tmp_path / "s" / "sweep_state.jsonl").read_text().splitlines():
        json.loads(line)
    json.loads((tmp_path / "s" / "summary.json").read_text())


def test_error_messages_stay_on_one_line_whatever_the_path(tmp_path):
    p = run_bytes(["inspect", os.fsencode(tmp_path) + b"/two\nlines.safetensors"])
    assert p.returncode == 2 and p.stderr.count(b"\n") == 1, p.stderr


# ---- --device is validated even when nothing is left to compute ------------------------------------

def test_device_is_validated_when_every_result_is_stored(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    args = ["analyze", fam / "code", "--store", store, "--quiet"]
    run(args + ["--out", tmp_path / "a1"])
    for bad in ["gpu", "CPU", ""]:
        fails(args + ["--out", tmp_path / "a2", "--device", bad], "--device")
    cmp = ["compare", "--base", fam / "pretrained", fam / "code", "--store", store, "--quiet"]
    run(cmp + ["--out", tmp_path / "c1"])
    fails(cmp + ["--out", tmp_path / "c2", "--device", "tpu"], "--device", "tpu")
    fails(["edit", "permute", "--model", fam / "code", "--out", tmp_path / "p", "--device", "tpu"], "--device")
    assert not (tmp_path / "a2").exists() and not (tmp_path / "c2").exists() and not (tmp_path / "p").exists()


# ---- option values, empty selections, names that are not one line ----------------------------------

@pytest.mark.parametrize("flag,value,needle", [
    ("--threads", "-1", "--threads"), ("--threads", "-2147483648", "--threads"),
    ("--max-memory", "nan", "--max-memory"), ("--max-memory", "inf", "--max-memory"),
    ("--max-memory", "0.4", "less than one byte"), ("--max-memory", "99999999999999999999G", "2^64"),
    ("--max-memory", "18446744073709551616", "2^64")])
def test_run_option_values_are_validated(fam, tmp_path, flag, value, needle):
    fails(["analyze", fam / "code", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", flag, value],
          needle)
    assert not (tmp_path / "a").exists()


def test_threads_zero_means_every_core(fam, tmp_path):
    p = run(["analyze", fam / "code", "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--threads", "0",
             "--no-heads", "--quiet"])
    assert p.returncode == 0 and (tmp_path / "a" / "metrics.csv").is_file()


def test_a_selection_that_matches_nothing_is_an_error_not_an_empty_success(fam, tmp_path):
    store = tmp_path / "s.sqlite"
    fails(["analyze", fam / "code", "--match", "zzz", "--out", tmp_path / "a", "--store", store],
          fam / "code", "no matrix", "--match")
    fails(["analyze", fam / "code", "--layers", "99", "--out", tmp_path / "a", "--store", store], "no matrix")
    fails(["compare", "--base", fam / "pretrained", fam / "code", "--roles", "lm_head", "--exclude", "lm_head",
           "--out", tmp_path / "c", "--store", store], fam / "pretrained", "no matrix")
    for edit in (["interpolate", fam / "pretrained", fam / "code", "--omega", "0.5"],
                 ["interpolate", fam / "pretrained", fam / "code", "--omega", "0"],
                 ["truncate", "--base", fam / "pretrained", "--model", fam / "code", "--rank", "2"]):
        fails(["edit", *edit, "--match", "zzz", "--out", tmp_path / "e"], "no floating-point tensor", "--match")
    assert not any((tmp_path / n).exists() for n in ("a", "c", "e"))
    # A checkpoint without any 2-D tensor has nothing to analyse either.
    vec = tmp_path / "vec"
    vec.mkdir()
    header = json.dumps({"norm.weight": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode()
    (vec / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bytes(16))
    fails(["analyze", vec, "--out", tmp_path / "a", "--store", store], "no matrix", "has none")


def write_f32_safetensors(path, tensors):
    """tensors: {name: float32 array}, written in order."""
    import numpy as np
    header, blobs, off = {}, [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a, dtype=np.float32).tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def test_names_with_nul_and_newline_survive_the_store_and_stay_one_line(tmp_path):
    import numpy as np
    rng = np.random.default_rng(0)
    write_f32_safetensors(tmp_path / "nul" / "model.safetensors",
                          {"t\u0000one": rng.standard_normal((32, 32)), "t\u0000two": 3 * rng.standard_normal((32, 32))})
    store = tmp_path / "s.sqlite"
    run(["analyze", tmp_path / "nul", "--out", tmp_path / "a", "--store", store, "--quiet"])
    p = run(["export", "--store", store, "--format", "jsonl"])
    tensors = {json.loads(line)["tensor"] for line in p.stdout.splitlines()}
    assert tensors == {"t\u0000one", "t\u0000two"}  # the whole names, not cut at the NUL
    # A warning that quotes a name with a newline is still one line.
    write_f32_safetensors(tmp_path / "nl" / "model.safetensors", {"w\ny": np.full((16, 16), np.nan)})
    p = run(["analyze", tmp_path / "nl", "--out", tmp_path / "b", "--store", store])
    warnings = [line for line in p.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "w\\x0ay" in warnings[0] and "non-finite" in warnings[0], p.stderr
