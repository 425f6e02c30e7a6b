"""Edited checkpoints carry every non-weight file of their primary input, and say what made them
(issue 14, "everything that is not a weight is carried over").

Checked on a model directory dressed as a sentence-transformers model: modules.json, 1_Pooling/,
2_Normalize/, a README, custom code, a chat template, plus weights in other formats that must not be
carried (they hold the input's weights, not the edit's).
"""

import json
import shutil
from pathlib import Path

import pytest

from conftest import run

CARRIED = {
    "modules.json": '[{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]',
    "sentence_bert_config.json": '{"max_seq_length": 256}',
    "config_sentence_transformers.json": '{"__version__": {}}',
    "1_Pooling/config.json": '{"pooling_mode_mean_tokens": true}',
    "2_Normalize/.keep_me_not": "hidden: left out",
    "README.md": "# a model",
    "modeling_custom.py": "class Custom: pass\n",
    "chat_template.jinja": "{{ messages }}",
}
NOT_CARRIED = ["pytorch_model.bin", "onnx/model.onnx", "pytorch_model.bin.index.json"]


@pytest.fixture()
def dressed(family_f32, tmp_path):
    d = tmp_path / "st"
    shutil.copytree(family_f32 / "math", d)
    for rel, text in {**CARRIED, **{n: "weights" for n in NOT_CARRIED}}.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    (d / "2_Normalize").mkdir(exist_ok=True)
    return d


@pytest.mark.parametrize("kind", ["permute", "interpolate", "truncate"])
def test_every_non_weight_file_is_carried(family_f32, dressed, tmp_path, kind):
    out = tmp_path / "out"
    args = {"permute": ["permute", "--model", dressed],
            "interpolate": ["interpolate", dressed, family_f32 / "code", "--omega", "0.5"],
            "truncate": ["truncate", "--base", family_f32 / "pretrained", "--model", dressed, "--keep", "0.5"]}[kind]
    run(["edit", *args, "--out", out])
    for rel, text in CARRIED.items():
        if Path(rel).name.startswith("."):
            assert not (out / rel).exists()
        else:
            assert (out / rel).read_text() == text, rel
    assert (out / "2_Normalize").is_dir()
    for rel in NOT_CARRIED:
        assert not (out / rel).exists(), rel
    record = json.loads((out / "diffract_edit.json").read_text())
    assert record["edit"] == kind
    assert record["inputs"][0] == {"name": "st", "path": str(dressed), "role": "primary"}
    assert record["not_carried"] == sorted(NOT_CARRIED)
    assert record["tensors_edited"] > 0


def test_an_edit_of_an_edit_keeps_the_chain(family_f32, tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    run(["edit", "permute", "--model", family_f32 / "math", "--seed", "3", "--out", first])
    run(["edit", "interpolate", first, family_f32 / "math", "--omega", "0.5", "--out", second])
    record = json.loads((second / "diffract_edit.json").read_text())
    assert record["edit"] == "interpolate" and record["parameters"] == {"omega": 0.5}
    assert record["input_provenance"]["edit"] == "permute"
    assert record["input_provenance"]["parameters"] == {"seed": 3}
