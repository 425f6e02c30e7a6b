#!/usr/bin/env python3
"""Build tiny MoE / multimodal / MLA models with the installed transformers, save them with
`save_pretrained`, and record the on-disk tensor layout, the relevant config keys, the modeling code
that consumes packed expert tensors, and a load-back round trip.

Run:  nice -n 10 /work/torchvenv/bin/python $LAYOUTS_OUT/make_layouts.py [name ...]

Outputs, per model <name>:
  $LAYOUTS_OUT/<name>/                 default `save_pretrained(dir)` (save_original_format=True)
  $LAYOUTS_OUT/<name>/LAYOUT.txt       the report
  $LAYOUTS_OUT/_native/<name>/         `save_pretrained(dir, save_original_format=False)`,
                                            i.e. the in-memory (v5 packed) layout, for comparison
  $LAYOUTS_OUT/_variants/gemma3_vision_model_prefix/   gemma3 tensors with the 'vision_tower.vision_model.' prefix
  $LAYOUTS_OUT/results.json            machine-readable summary used to write SUMMARY.md
No network access is needed: every config is built directly in Python.

tests/fixtures/transformers/ holds config.json and the tensor list (tensors.json: name, dtype, shape in file
order; materialize.py writes seeded weights of that layout) of some of its outputs (written by
transformers 5.25.0 with torch 2.15), so that the default test run reads layouts transformers itself
wrote without installing torch: gpt_oss, llama4, qwen2_5_vl, deepseek_v3, deepseek_v2_lite, qwen2_moe,
mixtral, olmoe as saved by default; qwen3_moe_packed = _native/qwen3_moe (the v5 in-memory packed layout);
gemma3 = _variants/gemma3_vision_model_prefix (the vision_tower.vision_model. prefix of real checkpoints).
Run with LAYOUTS_OUT=DIR to write elsewhere.
"""
from __future__ import annotations

import inspect
import json
import os
import platform
import shutil
import sys
import time
import traceback
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402
import safetensors  # noqa: E402
import transformers as T  # noqa: E402
from safetensors import safe_open  # noqa: E402

torch.set_num_threads(1)

OUT = Path(os.environ.get("LAYOUTS_OUT", "moe_layouts"))
NATIVE = OUT / "_native"
SEED = 0
SITE = Path(T.__file__).resolve().parent

# --------------------------------------------------------------------------------------------
# tiny configs
# --------------------------------------------------------------------------------------------
V = 128  # vocab
H = 64  # hidden
L = 2  # layers
NH, NKV, HD = 4, 2, 24  # heads, kv heads, head_dim (24 so q/k/o projections are not square)
E = 4  # experts
I_E = 24  # expert (moe) intermediate size: H=64, I=24, 2I=48 are all distinct -> orientation is unambiguous
I_D = 96  # dense-MLP intermediate size


def cfg_qwen3_moe():
    c = T.Qwen3MoeConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, moe_intermediate_size=I_E,
        num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
        num_experts=E, num_experts_per_tok=2, decoder_sparse_step=1, mlp_only_layers=[],
        max_position_embeddings=256, tie_word_embeddings=False,
    )
    return T.Qwen3MoeForCausalLM, c


def cfg_olmoe():
    c = T.OlmoeConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_E, num_hidden_layers=L,
        num_attention_heads=NH, num_key_value_heads=NKV, num_experts=E, num_experts_per_tok=2,
        max_position_embeddings=256, pad_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )
    return T.OlmoeForCausalLM, c


def cfg_mixtral():
    c = T.MixtralConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_E, num_hidden_layers=L,
        num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, num_local_experts=E,
        num_experts_per_tok=2, max_position_embeddings=256, tie_word_embeddings=False,
    )
    return T.MixtralForCausalLM, c


def cfg_gpt_oss():
    c = T.GptOssConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_E, num_hidden_layers=L,
        num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, num_local_experts=E,
        num_experts_per_tok=2, sliding_window=16, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256, tie_word_embeddings=False,
    )
    return T.GptOssForCausalLM, c


def _llama4_text():
    return T.Llama4TextConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_E, intermediate_size_mlp=I_D,
        num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD,
        num_local_experts=E, num_experts_per_tok=1, interleave_moe_layer_step=2,  # layer 1 MoE, layer 0 dense
        attention_chunk_size=32, max_position_embeddings=256, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False,
    )


def _llama4_vision():
    # pixel shuffle ratio 0.5 -> channels x4 -> intermediate_size must be 4*hidden_size
    return T.Llama4VisionConfig(
        hidden_size=32, intermediate_size=128, num_hidden_layers=1, num_attention_heads=2,
        image_size=28, patch_size=14, vision_output_dim=64, projector_input_dim=64,
        projector_output_dim=64, pixel_shuffle_ratio=0.5,
    )


def cfg_llama4():
    c = T.Llama4Config(
        text_config=_llama4_text().to_dict(), vision_config=_llama4_vision().to_dict(),
        boi_token_index=120, eoi_token_index=121, image_token_index=122, tie_word_embeddings=False,
    )
    return T.Llama4ForConditionalGeneration, c


def cfg_llama4_text():
    return T.Llama4ForCausalLM, _llama4_text()


def cfg_gemma3():
    text = T.Gemma3TextConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, num_hidden_layers=L,
        num_attention_heads=NH, num_key_value_heads=NKV, head_dim=HD, query_pre_attn_scalar=HD,
        sliding_window=16, layer_types=["sliding_attention", "full_attention"],
        max_position_embeddings=256, pad_token_id=0, eos_token_id=1, bos_token_id=2,
    )
    vision = T.SiglipVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        image_size=56, patch_size=14, vision_use_head=False,
    )
    c = T.Gemma3Config(
        text_config=text.to_dict(), vision_config=vision.to_dict(), mm_tokens_per_image=4,
        boi_token_index=120, eoi_token_index=121, image_token_index=122, tie_word_embeddings=True,
    )
    return T.Gemma3ForConditionalGeneration, c


def cfg_deepseek_v3():
    c = T.DeepseekV3Config(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, moe_intermediate_size=I_E,
        num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NH,
        n_shared_experts=1, n_routed_experts=E, n_group=2, topk_group=1, num_experts_per_tok=2,
        first_k_dense_replace=1, q_lora_rank=40, kv_lora_rank=20, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=12, max_position_embeddings=256, tie_word_embeddings=False,
        bos_token_id=0, eos_token_id=1,
    )
    return T.DeepseekV3ForCausalLM, c


def cfg_deepseek_v2_lite():
    c = T.DeepseekV2Config(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, moe_intermediate_size=I_E,
        num_hidden_layers=L, num_attention_heads=NH, num_key_value_heads=NH,
        n_shared_experts=2, n_routed_experts=E, num_experts_per_tok=2, topk_method="greedy",
        first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=20, qk_nope_head_dim=16,
        qk_rope_head_dim=8, v_head_dim=12, max_position_embeddings=256, tie_word_embeddings=False,
    )
    return T.DeepseekV2ForCausalLM, c


def cfg_qwen2_moe():
    c = T.Qwen2MoeConfig(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, moe_intermediate_size=I_E,
        shared_expert_intermediate_size=40, num_hidden_layers=L, num_attention_heads=NH,
        num_key_value_heads=NKV, num_experts=E, num_experts_per_tok=2, decoder_sparse_step=1,
        mlp_only_layers=[], qkv_bias=True, max_position_embeddings=256, tie_word_embeddings=False,
    )
    return T.Qwen2MoeForCausalLM, c


def cfg_qwen2_5_vl():
    text = dict(
        vocab_size=V, hidden_size=H, intermediate_size=I_D, num_hidden_layers=L,
        num_attention_heads=NH, num_key_value_heads=NKV, max_position_embeddings=256,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]},
        bos_token_id=0, eos_token_id=1,
    )
    vision = dict(
        depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=H,
        patch_size=14, spatial_merge_size=2, temporal_patch_size=2, window_size=56,
        fullatt_block_indexes=[1],
    )
    c = T.Qwen2_5_VLConfig(
        text_config=text, vision_config=vision, image_token_id=122, video_token_id=123,
        vision_start_token_id=120, vision_end_token_id=121, tie_word_embeddings=False,
    )
    return T.Qwen2_5_VLForConditionalGeneration, c


MODELS = {
    "qwen3_moe": cfg_qwen3_moe,
    "olmoe": cfg_olmoe,
    "mixtral": cfg_mixtral,
    "gpt_oss": cfg_gpt_oss,
    "llama4": cfg_llama4,
    "llama4_text": cfg_llama4_text,
    "gemma3": cfg_gemma3,
    "deepseek_v3": cfg_deepseek_v3,
    "deepseek_v2_lite": cfg_deepseek_v2_lite,
    "qwen2_moe": cfg_qwen2_moe,
    "qwen2_5_vl": cfg_qwen2_5_vl,
}

# Where the expert / MLA code lives, for quoting.  (module, class names to quote)
CODE_TO_QUOTE = {
    "qwen3_moe": ("qwen3_moe.modeling_qwen3_moe", ["Qwen3MoeExperts", "Qwen3MoeTopKRouter", "Qwen3MoeSparseMoeBlock"]),
    "olmoe": ("olmoe.modeling_olmoe", ["OlmoeExperts", "OlmoeTopKRouter", "OlmoeSparseMoeBlock"]),
    "mixtral": ("mixtral.modeling_mixtral", ["MixtralExperts", "MixtralTopKRouter", "MixtralSparseMoeBlock"]),
    "gpt_oss": ("gpt_oss.modeling_gpt_oss", ["GptOssExperts", "GptOssTopKRouter", "GptOssMLP"]),
    "llama4": ("llama4.modeling_llama4", ["Llama4TextExperts", "Llama4Router", "Llama4TextMoe"]),
    "llama4_text": ("llama4.modeling_llama4", ["Llama4TextExperts", "Llama4TextMoe"]),
    "gemma3": ("gemma3.modeling_gemma3", ["Gemma3MultiModalProjector"]),
    "deepseek_v3": ("deepseek_v3.modeling_deepseek_v3", ["DeepseekV3Experts", "DeepseekV3TopkRouter", "DeepseekV3MoE", "DeepseekV3Attention"]),
    "deepseek_v2_lite": ("deepseek_v2.modeling_deepseek_v2", ["DeepseekV2Experts", "DeepseekV2Moe", "DeepseekV2Attention"]),
    "qwen2_moe": ("qwen2_moe.modeling_qwen2_moe", ["Qwen2MoeExperts", "Qwen2MoeTopKRouter", "Qwen2MoeSparseMoeBlock"]),
    "qwen2_5_vl": ("qwen2_5_vl.modeling_qwen2_5_vl", ["Qwen2_5_VLPatchMerger"]),
}

RELEVANT_KEYS = [
    "model_type", "architectures", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "intermediate_size_mlp",
    "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts", "num_local_experts",
    "n_routed_experts", "n_shared_experts", "num_experts_per_tok", "first_k_dense_replace",
    "moe_layers", "interleave_moe_layer_step", "decoder_sparse_step", "mlp_only_layers",
    "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "qk_head_dim",
    "v_head_dim", "rope_interleave", "n_group", "topk_group", "topk_method", "routed_scaling_factor",
    "norm_topk_prob", "tie_word_embeddings", "vocab_size", "attention_bias", "qkv_bias", "mlp_bias",
    "swiglu_alpha", "swiglu_limit", "layer_types", "sliding_window", "rope_parameters",
    "query_pre_attn_scalar", "use_qk_norm", "no_rope_layers", "attention_chunk_size",
    # vision
    "image_size", "patch_size", "num_channels", "in_channels", "depth", "num_heads", "out_hidden_size",
    "spatial_merge_size", "temporal_patch_size", "window_size", "fullatt_block_indexes",
    "vision_output_dim", "projector_input_dim", "projector_output_dim", "pixel_shuffle_ratio",
    "vision_use_head", "mm_tokens_per_image", "image_token_index", "image_token_id",
    "boi_token_index", "eoi_token_index", "vision_start_token_id", "vision_end_token_id",
    "video_token_id", "vision_feature_select_strategy", "vision_feature_layer",
]


def pick_keys(d: dict) -> dict:
    out = {}
    for k in RELEVANT_KEYS:
        if k in d:
            out[k] = d[k]
    for sub in ("text_config", "vision_config"):
        if sub in d and isinstance(d[sub], dict):
            out[sub] = pick_keys(d[sub])
    return out


def fmt_config(d: dict, indent=2) -> list[str]:
    lines = []
    for k, v in d.items():
        if isinstance(v, dict) and k in ("text_config", "vision_config"):
            lines.append(" " * indent + f"{k}:  (nested dict in config.json)")
            lines += fmt_config(v, indent + 4)
        else:
            lines.append(" " * indent + f"{k} = {json.dumps(v)}")
    return lines


def read_safetensors(d: Path) -> dict[str, tuple[list[int], str, str]]:
    """name -> (shape, dtype, file) for every tensor in every *.safetensors file in d."""
    res = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                sl = fh.get_slice(k)
                res[k] = (list(sl.get_shape()), sl.get_dtype(), f.name)
    return res


def read_safetensors_metadata(d: Path) -> dict:
    out = {}
    for f in sorted(d.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as fh:
            out[f.name] = fh.metadata()
    return out


def load_tensor(d: Path, name: str, fname: str) -> torch.Tensor:
    with safe_open(str(d / fname), framework="pt") as fh:
        return fh.get_tensor(name)


def natural_key(s: str):
    import re
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


def quote_code(modname: str, classes: list[str]) -> list[str]:
    import importlib
    mod = importlib.import_module(f"transformers.models.{modname}")
    path = Path(mod.__file__).resolve()
    lines = []
    for cname in classes:
        cls = getattr(mod, cname, None)
        if cls is None:
            lines.append(f"  ({cname} not found in {path})")
            continue
        # use_experts_implementation wraps __init__/forward with functools.wraps; quote the class body
        src, start = inspect.getsourcelines(cls)
        end = start + len(src) - 1
        lines.append(f"  --- {path}:{start}-{end}  class {cname}")
        for i, s in enumerate(src):
            lines.append(f"  {start + i:5d}| {s.rstrip()}")
    return lines


def find_lines(path: Path, needles: list[str]) -> list[str]:
    out = []
    text = path.read_text().splitlines()
    for i, s in enumerate(text, 1):
        if any(n in s for n in needles):
            out.append(f"  {path}:{i}: {s.strip()}")
    return out


def describe_transforms(model) -> list[str]:
    from transformers.conversion_mapping import get_model_conversion_mapping
    try:
        convs = get_model_conversion_mapping(model, add_legacy=False)
    except Exception as e:  # pragma: no cover
        return [f"  get_model_conversion_mapping failed: {e!r}"]
    if not convs:
        return ["  (none: no WeightConverter/WeightRenaming registered -> state dict saved as in memory)"]
    out = []
    for c in convs:
        ops = getattr(c, "operations", None)
        ops_s = ", ".join(type(o).__name__ + (f"(dim={getattr(o, 'dim', '')})" if hasattr(o, "dim") else "") for o in ops) if ops else ""
        scope = getattr(c, "scope_prefix", None)
        out.append(
            f"  {type(c).__name__}: source={getattr(c, 'source_patterns', None)} -> target={getattr(c, 'target_patterns', None)}"
            + (f" ops=[{ops_s}]" if ops_s else "") + (f" scope_prefix={scope!r}" if scope else "")
        )
    return out


# Hand-written orientation notes, verified against the quoted code and by the numeric checks below.
NOTES = {
    "qwen2_moe_family": """\
In memory (v5): mlp.experts.gate_up_proj  [E, 2*I, H]   mlp.experts.down_proj [E, H, I]   (no expert biases)
  forward: gate, up = F.linear(x, gate_up_proj[e]).chunk(2, dim=-1)   -> nn.Linear orientation [out, in]
           gate/up CONCATENATED along dim 1 (rows [0:I] = gate, rows [I:2I] = up), NOT interleaved
           out = F.linear(act(gate) * up, down_proj[e])                  -> down_proj[e] is [out=H, in=I]
On disk (default save_pretrained, save_original_format=True): the conversion mapping "qwen2_moe"
  (MergeModulelist(dim=0) + Concatenate(dim=1)) is REVERSED at save time, so the file holds per-expert
  nn.Linear weights: mlp.experts.{e}.gate_proj.weight [I, H], mlp.experts.{e}.up_proj.weight [I, H],
  mlp.experts.{e}.down_proj.weight [H, I]   (== the pre-v5 / original-checkpoint naming).
  gate_proj.weight == gate_up_proj[e, :I, :], up_proj.weight == gate_up_proj[e, I:, :], down_proj.weight == down_proj[e]
  (checked numerically above).
With save_original_format=False the packed in-memory tensors are written as-is (see _native/).""",
    "mixtral": """\
In memory (v5): mlp.experts.gate_up_proj [E, 2*I, H]   mlp.experts.down_proj [E, H, I]  (module renamed block_sparse_moe -> mlp)
  forward identical to qwen2_moe family: F.linear(x, gate_up_proj[e]).chunk(2, dim=-1) -> [gate ; up] concatenated,
  nn.Linear [out, in] orientation; F.linear(h, down_proj[e]).
On disk (default save): conversion "mixtral" is reversed -> ORIGINAL Mixtral names:
  model.layers.{l}.block_sparse_moe.experts.{e}.w1.weight [I, H] (gate), .w3.weight [I, H] (up), .w2.weight [H, I] (down),
  router: model.layers.{l}.block_sparse_moe.gate.weight [E, H].
  w1 == gate_up_proj[e, :I], w3 == gate_up_proj[e, I:], w2 == down_proj[e] (checked below).""",
    "gpt_oss": """\
In memory AND on disk (no conversion mapping registered for gpt_oss -> saved exactly as in memory, PACKED):
  mlp.experts.gate_up_proj      [E, H, 2*I]   (TRANSPOSED vs nn.Linear: [in, out]; x @ W)
  mlp.experts.gate_up_proj_bias [E, 2*I]
  mlp.experts.down_proj         [E, I, H]     ([in, out]; h @ W)
  mlp.experts.down_proj_bias    [E, H]
  mlp.router.weight [E, H], mlp.router.bias [E]
  forward: gate_up = x @ gate_up_proj[e] + gate_up_proj_bias[e]
           gate, up = gate_up[..., ::2], gate_up[..., 1::2]      -> gate/up INTERLEAVED along the last (out) axis
           gate = gate.clamp(max=limit); up = up.clamp(-limit, limit)
           glu = gate * sigmoid(gate * alpha); h = (up + 1) * glu
           out = h @ down_proj[e] + down_proj_bias[e]
  decorator: @use_experts_implementation(is_concatenated=False, is_transposed=True, has_bias=True)""",
    "llama4": """\
In memory AND on disk (no conversion mapping for llama4 -> saved as in memory, PACKED, no biases):
  feed_forward.experts.gate_up_proj [E, H, 2*I]  (TRANSPOSED: [in, out], used with torch.bmm(x, W))
  feed_forward.experts.down_proj    [E, I, H]    ([in, out])
  feed_forward.router.weight [E, H] (nn.Linear), feed_forward.shared_expert.{gate,up,down}_proj.weight (nn.Linear)
  forward: gate_up = torch.bmm(hidden_states.view(E, -1, H), gate_up_proj); gate, up = gate_up.chunk(2, dim=-1)
           -> gate/up CONCATENATED along last axis (cols [0:I]=gate, [I:2I]=up)
           next_states = torch.bmm(up * act(gate), down_proj)
  Dense layers (not in moe_layers) use feed_forward.{gate,up,down}_proj with intermediate_size_mlp.""",
    "deepseek": """\
MLA attention (nn.Linear, [out, in]):
  q_lora_rank set:  self_attn.q_a_proj [q_lora_rank, H], self_attn.q_a_layernorm [q_lora_rank],
                    self_attn.q_b_proj [n_heads*(qk_nope+qk_rope), q_lora_rank]
  q_lora_rank None: self_attn.q_proj   [n_heads*(qk_nope+qk_rope), H]
  self_attn.kv_a_proj_with_mqa [kv_lora_rank + qk_rope, H]  (split: first kv_lora_rank rows = compressed kv, last qk_rope rows = shared k_rope)
  self_attn.kv_a_layernorm [kv_lora_rank]
  self_attn.kv_b_proj [n_heads*(qk_nope + v_head_dim), kv_lora_rank]  (per head: first qk_nope rows = k_nope, next v_head_dim = v)
  self_attn.o_proj [H, n_heads*v_head_dim]
  q per head split: [qk_nope | qk_rope].""",
}

NOTE_FOR = {
    "qwen3_moe": ["qwen2_moe_family"], "olmoe": ["qwen2_moe_family"], "qwen2_moe": ["qwen2_moe_family"],
    "deepseek_v3": ["qwen2_moe_family", "deepseek"], "deepseek_v2_lite": ["qwen2_moe_family", "deepseek"],
    "mixtral": ["mixtral"], "gpt_oss": ["gpt_oss"], "llama4": ["llama4"], "llama4_text": ["llama4"],
}


def expert_unpack_check(model, disk: Path, tensors: dict) -> list[str]:
    """Verify the relation between in-memory packed experts and on-disk per-expert tensors."""
    out = []
    sd = model.state_dict()
    for k, v in sd.items():
        if not k.endswith("experts.gate_up_proj") or v.dim() != 3:
            continue
        prefix = k[: -len("gate_up_proj")]  # "...mlp.experts."
        down = sd[prefix + "down_proj"]
        E_, a, b = v.shape
        # candidate on-disk names
        cands = [
            (prefix + "{e}.gate_proj.weight", prefix + "{e}.up_proj.weight", prefix + "{e}.down_proj.weight"),
            (prefix.replace(".mlp.", ".block_sparse_moe.") + "{e}.w1.weight",
             prefix.replace(".mlp.", ".block_sparse_moe.") + "{e}.w3.weight",
             prefix.replace(".mlp.", ".block_sparse_moe.") + "{e}.w2.weight"),
        ]
        # the disk key may have a different model prefix; match by suffix
        done = False
        for g, u, dn in cands:
            if g.format(e=0) in tensors:
                ok = True
                I = a // 2
                for e in range(E_):
                    tg = load_tensor(disk, g.format(e=e), tensors[g.format(e=e)][2])
                    tu = load_tensor(disk, u.format(e=e), tensors[u.format(e=e)][2])
                    td = load_tensor(disk, dn.format(e=e), tensors[dn.format(e=e)][2])
                    ok &= torch.equal(tg, v[e, :I, :]) and torch.equal(tu, v[e, I:, :]) and torch.equal(td, down[e])
                out.append(
                    f"  {k} {list(v.shape)} -> {g.split('.')[-2]}/{u.split('.')[-2]}/{dn.split('.')[-2]}: "
                    f"gate == gate_up_proj[e,:I,:], up == gate_up_proj[e,I:,:], down == down_proj[e] : {'YES' if ok else 'NO'}"
                )
                done = True
                break
        if not done and k in tensors:
            t = load_tensor(disk, k, tensors[k][2])
            out.append(f"  {k} saved packed as-is ({list(t.shape)}), equal to in-memory: {torch.equal(t, v)}")
    return out


def forward_logits(model, cfg):
    torch.manual_seed(123)
    ids = torch.randint(3, 100, (1, 8))
    with torch.no_grad():
        o = model(input_ids=ids)
    return o.logits


def _suffix_match(a: dict, b: dict) -> dict:
    """Map each key of b to a key of a: identical name, else the unique key of a ending with '.'+name
    (e.g. text-only class 'model.layers.0...' vs multimodal 'model.language_model.layers.0...'/
    'language_model.model.layers.0...')."""
    m = {}
    for kb in b:
        if kb in a:
            m[kb] = kb
            continue
        stem = kb.split(".", 1)[1] if kb.startswith("model.") else kb
        c = [ka for ka in a if ka.endswith("." + stem) and ("language_model" in ka or "text" in ka)]
        if len(c) == 1:
            m[kb] = c[0]
    return m


def round_trip(cls, model, d: Path, cfg, auto=None):
    """Load d back and compare state dicts (+ logits).  Returns (ok, detail, loaded_model)."""
    try:
        loader = getattr(T, auto) if auto else cls
        loaded = loader.from_pretrained(str(d), dtype=torch.float32)
        loaded.eval()
    except Exception as e:
        return False, f"load failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}", None
    a = model.state_dict()
    b = loaded.state_dict()
    if type(loaded) is not type(model):
        # different class (e.g. AutoModelForCausalLM -> text-only class): compare what it holds
        m = _suffix_match(a, b)
        unmatched = [k for k in b if k not in m]
        diff = [k for k, ka in m.items() if a[ka].shape != b[k].shape or not torch.equal(a[ka], b[k])]
        ok = not unmatched and not diff
        detail = (f"class={type(loaded).__name__} (differs from saved class {type(model).__name__}); "
                  f"loaded keys={len(b)} of saved model's {len(a)}; matched to saved tensors by name/suffix={len(m)} "
                  f"unmatched={len(unmatched)} value_mismatch={len(diff)}")
        if unmatched:
            detail += f"; unmatched e.g. {unmatched[:3]}"
        if diff:
            detail += f"; mismatch e.g. {diff[:3]}"
        dropped = len(a) - len(set(m.values()))
        if dropped:
            detail += f"; {dropped} saved tensors not part of this class (dropped as UNEXPECTED, e.g. vision tower/projector)"
        return ok, detail, loaded
    missing = [k for k in a if k not in b]
    extra = [k for k in b if k not in a]
    diff = [k for k in a if k in b and (a[k].shape != b[k].shape or not torch.equal(a[k], b[k]))]
    detail = f"class={type(loaded).__name__}; keys orig={len(a)} loaded={len(b)} missing={len(missing)} extra={len(extra)} value_mismatch={len(diff)}"
    if missing:
        detail += f"; missing e.g. {missing[:3]}"
    if extra:
        detail += f"; extra e.g. {extra[:3]}"
    if diff:
        detail += f"; mismatch e.g. {diff[:3]}"
    logits_ok = None
    if not auto or type(loaded) is type(model):
        try:
            logits_ok = torch.equal(forward_logits(model, cfg), forward_logits(loaded, cfg))
            detail += f"; identical logits on 8 random tokens: {logits_ok}"
        except Exception as e:
            detail += f"; forward failed: {type(e).__name__}: {str(e)[:200]}"
    ok = not missing and not extra and not diff and (logits_ok in (None, True))
    return ok, detail, loaded


def build_one(name: str, results: dict):
    cls, cfg = MODELS[name]()
    torch.manual_seed(SEED)
    model = cls(cfg)
    model.eval()
    mem_sd = {k: (list(v.shape), str(v.dtype).replace("torch.", "")) for k, v in model.state_dict().items()}

    d = OUT / name
    nd = NATIVE / name
    for p in (d, nd):
        if p.exists():
            shutil.rmtree(p)
    t0 = time.time()
    model.save_pretrained(str(d))
    model.save_pretrained(str(nd), save_original_format=False)
    save_s = time.time() - t0

    cfg_json = json.loads((d / "config.json").read_text())
    tensors = read_safetensors(d)
    ntensors = read_safetensors(nd)
    meta = read_safetensors_metadata(d)

    lines = []
    lines.append(f"# LAYOUT: {name}")
    lines.append(f"transformers {T.__version__}  torch {torch.__version__}  safetensors {safetensors.__version__}  python {platform.python_version()}")
    lines.append(f"class: {cls.__module__}.{cls.__name__}   seed {SEED}   dtype float32 (model built with cls(config), saved with model.save_pretrained(dir))")
    lines.append(f"files: {sorted(p.name for p in d.iterdir() if p.name != 'LAYOUT.txt')}")
    lines.append(f"safetensors metadata: {meta}")
    lines.append("")
    lines.append("## config.json (relevant keys, as written)")
    lines += fmt_config(pick_keys(cfg_json))
    lines.append("")
    lines.append("## tensors in model.safetensors (default save_pretrained == save_original_format=True)")
    lines.append(f"  count: {len(tensors)}")
    for k in sorted(tensors, key=natural_key):
        shp, dt, f = tensors[k]
        lines.append(f"  {k}  {shp}  {dt}")
    lines.append("")

    # Differences between in-memory state dict and disk
    mem_only = sorted(set(mem_sd) - set(tensors), key=natural_key)
    disk_only = sorted(set(tensors) - set(mem_sd), key=natural_key)
    lines.append("## in-memory state_dict vs default-saved file")
    if not mem_only and not disk_only:
        lines.append("  identical key sets: the file is the in-memory state dict (no save-time conversion)")
    else:
        lines.append(f"  keys only in memory ({len(mem_only)}):")
        for k in mem_only:
            lines.append(f"    {k}  {mem_sd[k][0]}  {mem_sd[k][1]}")
        lines.append(f"  keys only on disk ({len(disk_only)}) (first 40):")
        for k in disk_only[:40]:
            lines.append(f"    {k}  {tensors[k][0]}  {tensors[k][1]}")
    lines.append("")
    lines.append("## weight conversion mapping (transformers.conversion_mapping.get_model_conversion_mapping(model, add_legacy=False))")
    lines.append("  applied at load time (checkpoint -> memory) and reversed by save_pretrained(save_original_format=True)")
    lines += describe_transforms(model)
    lines.append("")
    lines.append(f"## _native/{name} (save_pretrained(dir, save_original_format=False)): tensors differing from default save")
    nd_only = sorted(set(ntensors) - set(tensors), key=natural_key)
    if not nd_only and set(ntensors) == set(tensors):
        lines.append("  none: same tensor names/shapes")
    else:
        for k in nd_only:
            lines.append(f"    {k}  {ntensors[k][0]}  {ntensors[k][1]}")
    lines.append("")

    checks = expert_unpack_check(model, d, tensors)
    if checks:
        lines.append("## numeric check: in-memory packed experts vs saved tensors")
        lines += checks
        lines.append("")

    if name in NOTE_FOR:
        lines.append("## how transformers' modeling code uses the expert / MLA tensors")
        for n in NOTE_FOR[name]:
            lines.append(NOTES[n])
        lines.append("")

    modname, classes = CODE_TO_QUOTE[name]
    lines.append("## quoted modeling code (exact installed source with line numbers)")
    lines += quote_code(modname, classes)
    # decorator lines
    import importlib
    mpath = Path(importlib.import_module(f"transformers.models.{modname}").__file__).resolve()
    deco = find_lines(mpath, ["@use_experts_implementation"])
    if deco:
        lines.append("  decorators:")
        lines += deco
    has_experts = any("experts" in k for k in mem_sd)
    impl = {}
    for k_, sub in [("", model.config)] + [(a, getattr(model.config, a)) for a in ("text_config", "vision_config") if hasattr(model.config, a)]:
        impl[k_ or "<root>"] = getattr(sub, "_experts_implementation", None)
    if has_experts:
      lines.append(f"  config._experts_implementation in this run (CPU, default): {impl}")
      lines.append("  (the eager forward quoted above is the reference; 'batched_mm'/'grouped_mm' implementations in")
      lines.append("   transformers/integrations/moe.py consume the SAME tensors, honouring is_transposed / has_bias / _apply_gate:)")
      lines += find_lines(SITE / "integrations" / "moe.py", [
        "def _batched_linear", "out = torch.bmm(input.unsqueeze(1), weight)", "out = torch.bmm(weight, input.unsqueeze(-1))",
        "def _default_apply_gate", "gate, up = gate_up_out.chunk(2, dim=-1)", "is_concatenated: bool = True",
        "is_transposed: bool = False,", "or interleaved layout [gate0, up0"])
    lines.append("")

    # round trips
    rt = {}
    ok, det, loaded = round_trip(cls, model, d, cfg)
    rt[f"{cls.__name__}.from_pretrained(<name>/)"] = (ok, det)
    ok, det, _ = round_trip(cls, model, nd, cfg)
    rt[f"{cls.__name__}.from_pretrained(_native/<name>/)"] = (ok, det)
    ok, det, _ = round_trip(cls, model, d, cfg, auto="AutoModelForCausalLM")
    rt["AutoModelForCausalLM.from_pretrained(<name>/)"] = (ok, det)
    if "vision_config" in cfg_json:
        ok, det, _ = round_trip(cls, model, d, cfg, auto="AutoModelForImageTextToText")
        rt["AutoModelForImageTextToText.from_pretrained(<name>/)"] = (ok, det)
    lines.append("## round trip (from_pretrained -> state_dict values identical to the saved model; logits compared when same class)")
    for k, (ok, det) in rt.items():
        lines.append(f"  {k}: {'YES' if ok else 'NO'}  ({det})")
    # re-save of a model that came from from_pretrained (it then carries _weight_conversions from the load)
    resave_same = None
    if loaded is not None:
        rd = NATIVE / f"{name}__resave_tmp"
        if rd.exists():
            shutil.rmtree(rd)
        loaded.save_pretrained(str(rd))
        rtensors = read_safetensors(rd)
        resave_same = {k: v[:2] for k, v in rtensors.items()} == {k: v[:2] for k, v in tensors.items()}
        lines.append(f"  re-save of the model loaded from <name>/ (save_pretrained again) gives the same tensor names/shapes: "
                     f"{'YES' if resave_same else 'NO'}")
        if not resave_same:
            for k in sorted(set(rtensors) ^ set(tensors), key=natural_key)[:20]:
                lines.append(f"    {'re-save only' if k in rtensors else 'first save only'}: {k}")
        shutil.rmtree(rd)
    lines.append("")
    (d / "LAYOUT.txt").write_text("\n".join(lines) + "\n")

    results[name] = {
        "class": cls.__name__,
        "config": pick_keys(cfg_json),
        "tensors": {k: tensors[k][:2] for k in tensors},
        "native_tensors": {k: ntensors[k][:2] for k in ntensors},
        "mem": mem_sd,
        "round_trip": {k: [v[0], v[1]] for k, v in rt.items()},
        "resave_same": resave_same,
        "expert_checks": checks,
        "save_s": save_s,
    }


def gemma3_prefix_variant(results: dict):
    """Real Gemma 3 checkpoints name the SigLIP tower 'vision_tower.vision_model.*'; a from-scratch
    save_pretrained writes 'vision_tower.*' (PrefixChange transforms are dropped when the model did not come
    from from_pretrained).  Write the 'vision_model' variant to _variants/ and check both load identically,
    and what a re-save of the variant writes."""
    from safetensors.torch import load_file, save_file
    src = OUT / "gemma3"
    dst = OUT / "_variants" / "gemma3_vision_model_prefix"
    if dst.exists():
        shutil.rmtree(dst)
    dst.mkdir(parents=True)
    sd = load_file(str(src / "model.safetensors"))
    new = {("vision_tower.vision_model." + k[len("vision_tower."):] if k.startswith("vision_tower.") else k): v
           for k, v in sd.items()}
    save_file(new, str(dst / "model.safetensors"), metadata={"format": "pt"})
    shutil.copy(src / "config.json", dst / "config.json")
    a = T.Gemma3ForConditionalGeneration.from_pretrained(str(src)).state_dict()
    m = T.Gemma3ForConditionalGeneration.from_pretrained(str(dst))
    b = m.state_dict()
    same = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    rd = OUT / "_variants" / "_tmp_resave"
    if rd.exists():
        shutil.rmtree(rd)
    m.save_pretrained(str(rd))
    rk = sorted(read_safetensors(rd), key=natural_key)
    shutil.rmtree(rd)
    resave_prefix = sorted({k.split(".")[0] + "." + k.split(".")[1] for k in rk})
    txt = [
        "# gemma3 variant: same tensors as ../../gemma3 but SigLIP tower renamed vision_tower.* -> vision_tower.vision_model.*",
        f"transformers {T.__version__}",
        f"Gemma3ForConditionalGeneration.from_pretrained(this dir) gives the same state dict as from ../../gemma3: {'YES' if same else 'NO'}",
        f"re-saving the model loaded from this dir writes these top-level prefixes: {resave_prefix}",
        "  (i.e. transformers remembers the prefix it removed at load and puts it back at save; a model built from a config",
        "   and saved directly has no such record, so it writes vision_tower.* without vision_model.)",
    ]
    (dst / "LAYOUT.txt").write_text("\n".join(txt) + "\n")
    results["_gemma3_variant"] = {"loads_same": same, "resave_prefixes": resave_prefix}
    print("    gemma3 variant: loads_same=%s resave_prefixes=%s" % (same, resave_prefix), flush=True)


def main():
    names = sys.argv[1:] or list(MODELS)
    OUT.mkdir(parents=True, exist_ok=True)
    NATIVE.mkdir(parents=True, exist_ok=True)
    rpath = OUT / "results.json"
    results = json.loads(rpath.read_text()) if rpath.exists() else {}
    results.setdefault("_failures", {})
    results["_versions"] = {"transformers": T.__version__, "torch": torch.__version__,
                            "safetensors": safetensors.__version__, "python": platform.python_version()}
    for name in names:
        print(f"=== {name}", flush=True)
        try:
            build_one(name, results)
            results["_failures"].pop(name, None)
            print(f"    ok: {len(results[name]['tensors'])} tensors; round trip: "
                  + ", ".join(f"{k}={'Y' if v[0] else 'N'}" for k, v in results[name]["round_trip"].items())
                  + f"; resave_same={results[name]['resave_same']}", flush=True)
        except Exception as e:
            tb = traceback.format_exc()
            results["_failures"][name] = f"{type(e).__name__}: {e}"
            results.pop(name, None)
            print(tb, flush=True)
    if "gemma3" in names and "gemma3" in results:
        try:
            gemma3_prefix_variant(results)
        except Exception as e:
            results["_failures"]["gemma3_variant"] = f"{type(e).__name__}: {e}"
            traceback.print_exc()
    rpath.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
