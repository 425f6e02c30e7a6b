"""`diffract generate --preset`: the preset gives the OLMo-2 shapes, and a shape flag given with it
overrides that one value (a 7B-shaped model in two blocks is what a quick benchmark wants); an unknown
preset is refused with exit 2."""
import json

from safetensors.numpy import load_file

from conftest import run


def config_and_tensors(model_dir):
    cfg = json.loads((model_dir / "config.json").read_text())
    tensors = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        tensors.update({k: v.shape for k, v in load_file(f).items()})
    return cfg, tensors


def test_shape_flags_override_the_preset(tmp_path):
    # 1b's hidden size and heads stay; layers, MLP width and vocabulary are the flags'.
    run(["generate", "--out", tmp_path / "fam", "--preset", "1b", "--layers", "1", "--intermediate", "256",
         "--vocab", "64", "--models", "pretrained", "--dtype", "F16"])
    cfg, shapes = config_and_tensors(tmp_path / "fam" / "pretrained")
    assert cfg["num_hidden_layers"] == 1
    assert cfg["hidden_size"] == 2048 and cfg["num_attention_heads"] == 16 and cfg["num_key_value_heads"] == 16
    assert cfg["intermediate_size"] == 256 and cfg["vocab_size"] == 64
    assert shapes["model.layers.0.self_attn.q_proj.weight"] == (2048, 2048)
    assert shapes["model.layers.0.mlp.down_proj.weight"] == (2048, 256)
    assert not any(name.startswith("model.layers.1.") for name in shapes)


def test_heads_without_kv_heads_keep_full_attention(tmp_path):
    run(["generate", "--out", tmp_path / "fam", "--preset", "1b", "--layers", "1", "--heads", "8",
         "--intermediate", "128", "--vocab", "32", "--models", "pretrained", "--dtype", "F16"])
    cfg, shapes = config_and_tensors(tmp_path / "fam" / "pretrained")
    assert cfg["num_attention_heads"] == 8 and cfg["num_key_value_heads"] == 8
    assert shapes["model.layers.0.self_attn.k_proj.weight"] == (2048, 2048)


def test_unknown_preset_is_refused(tmp_path):
    p = run(["generate", "--out", tmp_path / "fam", "--preset", "3b"], check=False)
    assert p.returncode == 2 and "--preset" in p.stderr and not (tmp_path / "fam").exists()
