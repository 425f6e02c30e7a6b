"""No silent partial result and no exit 1 for what is not a bug (issue 33, classes 8 and 9), and the
adapter form of a rewind refuses what the full rewind refuses (class 6).

Independent facts: the inputs' shapes and dtypes as written here with safetensors, the process's
resource limits (resource.setrlimit), and the full rewind's own refusal.
"""

import resource
import subprocess

import numpy as np
import pytest

from conftest import assert_input_error, binary, run

st = pytest.importorskip("safetensors.numpy")


def save(d, tensors):
    d.mkdir(parents=True, exist_ok=True)
    st.save_file(tensors, str(d / "model.safetensors"))
    return d


def mat(seed, shape=(16, 16), dtype=np.float32):
    return np.random.default_rng(seed).normal(size=shape).astype(dtype)


def test_compare_names_a_matrix_whose_base_counterpart_is_not_one(tmp_path):
    base = save(tmp_path / "base", {"layers.0.q.weight": mat(1, (16,)), "layers.0.k.weight": mat(2)})
    model = save(tmp_path / "model", {"layers.0.q.weight": mat(3), "layers.0.k.weight": mat(4)})
    p = run(["compare", "--base", base, model, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite"], check=False)
    assert_input_error(p, "layers.0.q.weight", "is not a matrix of this shape")
    assert not (tmp_path / "c").exists()
    # With --allow-partial it is skipped and listed, never dropped without a word.
    run(["compare", "--base", base, model, "--out", tmp_path / "c", "--store", tmp_path / "s.sqlite",
         "--allow-partial"])
    assert "layers.0.q.weight" in (tmp_path / "c" / "skipped.csv").read_text()


def test_analyze_refuses_matrices_it_cannot_read_unless_partial_is_allowed(tmp_path):
    """A weight whose values are not decoded is an error naming it (issue 46: never a silent partial
    result); --allow-partial skips it and the warning counts it."""
    m = save(tmp_path / "m", {"layers.0.q.weight": mat(1), "layers.0.idx.weight": np.arange(64, dtype=np.int32).reshape(8, 8)})
    p = run(["analyze", m, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite"], check=False)
    assert_input_error(p, "layers.0.idx.weight", "dtype I32", "--allow-partial")
    assert not (tmp_path / "a").exists()
    p = run(["analyze", m, "--out", tmp_path / "a", "--store", tmp_path / "s.sqlite", "--allow-partial"])
    warnings = [l for l in p.stderr.splitlines() if l.startswith("diffract: warning:")]
    assert any("1 selected matrix skipped" in w and "dtype I32 (1)" in w and "layers.0.idx.weight" in w
               for w in warnings), p.stderr


def test_edits_that_would_edit_nothing_are_refused(tmp_path):
    a = save(tmp_path / "a", {"layers.0.q.weight": mat(1), "layers.0.k.weight": mat(2)})
    empty = save(tmp_path / "empty", {})
    vectors = save(tmp_path / "vectors", {"layers.0.norm.weight": mat(3, (16,)), "layers.0.bias": mat(4, (16,))})
    for args, needle in [
        (["edit", "interpolate", a, empty, "--omega", "0.5"], "in every input"),
        (["edit", "interpolate", a, empty, "--omega", "0"], "in every input"),
        (["edit", "merge", "--base", a, "--models", a, empty], "in every input"),
        (["edit", "truncate", "--base", vectors, "--model", vectors, "--keep", "0.5"], "no selected"),
    ]:
        out = tmp_path / f"out{len(needle)}{args[1]}"
        p = run([*args, "--out", out], check=False)
        assert p.returncode == 2, (args, p.stderr)
        assert needle in p.stderr, p.stderr
        assert not out.exists()


@pytest.fixture()
def lora_setup(tmp_path):
    import test_lora

    rng = np.random.default_rng(7)
    base = test_lora.bert_base(tmp_path / "base", rng)
    module = "encoder.layer.0.attention.self.query"
    tensors = {f"base_model.model.{module}.lora_A.weight": mat(5, (4, test_lora.E)),
               f"base_model.model.{module}.lora_B.weight": mat(6, (test_lora.E, 4))}
    config = {"peft_type": "LORA", "base_model_name_or_path": str(tmp_path / "base"), "r": 4, "lora_alpha": 8,
              "target_modules": ["query"]}
    heads = tmp_path / "heads.csv"
    heads.write_text("layer,head\n0,1\n")
    return base, tensors, config, heads, test_lora.write_adapter


@pytest.mark.parametrize("poison", ["nan_factor", "huge_alpha"])
def test_rewind_as_lora_refuses_what_the_full_rewind_refuses(tmp_path, lora_setup, poison):
    _, tensors, config, heads, write_adapter = lora_setup
    if poison == "nan_factor":
        a = next(k for k in tensors if k.endswith("lora_A.weight"))
        tensors[a][0, 0] = np.nan
    else:
        config["lora_alpha"] = 1e308
    write_adapter(tmp_path / "ad", config, tensors)
    spec = f"{tmp_path / 'base'}+{tmp_path / 'ad'}"
    full = run(["edit", "rewind", "--base", tmp_path / "base", "--model", spec, "--heads", heads, "--out",
                tmp_path / "full"], check=False)
    assert full.returncode == 2, full.stderr
    lora = run(["edit", "rewind", "--base", tmp_path / "base", "--model", spec, "--heads", heads, "--as-lora",
                "--out", tmp_path / "rw"], check=False)
    assert_input_error(lora, "non-finite")
    assert not (tmp_path / "rw").exists()


def test_out_through_an_existing_file_is_bad_input(tmp_path, family_f32):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for args in (["analyze", family_f32 / "math", "--store", tmp_path / "s.sqlite"],
                 ["edit", "permute", "--model", family_f32 / "math"],
                 ["sweep", "interpolate", family_f32 / "math", family_f32 / "code", "--omegas", "0,1", "--eval",
                  "echo 1"]):
        p = run([*args, "--out", blocker / "sub"], check=False)
        assert p.returncode == 2, (args, p.returncode, p.stderr)
        assert str(blocker) in p.stderr


def test_too_many_open_files_is_bad_input(tmp_path, family_bf16_sharded):
    def few_files():
        # stdin, stdout, stderr and one more: the loader's libraries open one at a time, two shards not
        resource.setrlimit(resource.RLIMIT_NOFILE, (4, 4))

    p = subprocess.run([binary(), "analyze", family_bf16_sharded / "math", "--out", tmp_path / "a", "--store",
                        tmp_path / "s.sqlite", "--quiet"], capture_output=True, text=True, preexec_fn=few_files)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert_input_error(p, "Too many open files")


def test_a_summary_that_cannot_be_written_is_not_an_internal_error(tmp_path, family_f32):
    with open("/dev/full", "w") as full:
        p = subprocess.run([binary(), "analyze", family_f32 / "math", "--out", tmp_path / "a", "--store",
                            tmp_path / "s.sqlite"], stderr=full, stdout=subprocess.DEVNULL)
    assert p.returncode == 2
