"""The shipped evaluators take what diffract's edits and sweeps give them besides Hugging Face
directories: a GGUF file (or a directory holding one, as an edit of a GGUF writes), loaded by
transformers with gguf_file= (dequantised), and a PEFT adapter directory, merged into its base
(base_model_name_or_path) with PEFT's merge_and_unload. What a path holds is decided without torch
(`hf.model_source`, tested in CI); the scores are checked where torch is installed: a GGUF F32
conversion scores as its Hugging Face original, an adapter as the merged model it stands for.
"""
import json

import pytest

from diffract_spectral.eval import hf
from diffract_spectral.eval.errors import EvalError


def test_model_source_tells_what_a_path_holds(tmp_path):
    hf_dir = tmp_path / "hf"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text("{}")
    (hf_dir / "model.safetensors").write_bytes(b"")
    assert hf.model_source(hf_dir) == hf.ModelSource("hf", hf_dir)
    assert hf.model_source(hf_dir / "model.safetensors") == hf.ModelSource("hf", hf_dir)
    g = tmp_path / "edit"
    g.mkdir()
    (g / "tiny.gguf").write_bytes(b"GGUF")
    (g / "diffract_edit.json").write_text("{}")
    assert hf.model_source(g) == hf.ModelSource("gguf", g, "tiny.gguf")
    assert hf.model_source(g / "tiny.gguf") == hf.ModelSource("gguf", g, "tiny.gguf")
    assert str(hf.model_source(g)) == str(g / "tiny.gguf")
    ad = tmp_path / "adapter"
    ad.mkdir()
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "base_model_name_or_path": str(hf_dir)}))
    assert hf.model_source(ad) == hf.ModelSource("adapter", ad, base=str(hf_dir))
    # What cannot be evaluated is one line naming the path and what was expected.
    (g / "other.gguf").write_bytes(b"GGUF")
    with pytest.raises(EvalError, match="2 GGUF files"):
        hf.model_source(g)
    (ad / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}))
    with pytest.raises(EvalError, match="no base_model_name_or_path"):
        hf.model_source(ad)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(EvalError, match="Hugging Face model directory, a GGUF file or a PEFT adapter"):
        hf.model_source(empty)


# --- with torch: the scores ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    st = pytest.importorskip("safetensors.numpy")
    from test_eval_models import char_tokenizer, text_file
    from test_gguf_rope import FFN, HIDDEN, LAYERS, N_HEAD, N_KV, VOCAB, convert

    d = tmp_path_factory.mktemp("llama")
    torch.manual_seed(3)
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                      num_attention_heads=N_HEAD, num_key_value_heads=N_KV, num_hidden_layers=LAYERS,
                                      rms_norm_eps=1e-5, max_position_embeddings=2048, tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).eval()
    model.save_pretrained(d / "hf")
    char_tokenizer().save_pretrained(d / "hf")
    convert(st.load_file(str(d / "hf" / "model.safetensors")), d / "tiny.gguf", "F32")
    return {"dir": d, "hf": d / "hf", "gguf": d / "tiny.gguf", "text": text_file(d, chars=300)}


def test_a_gguf_scores_as_its_hugging_face_original(tiny_llama, tmp_path):
    from diffract_spectral.eval.clm import perplexity

    t = tiny_llama
    want = perplexity(t["hf"], t["text"])
    got = perplexity(t["gguf"], t["text"], tokenizer=t["hf"])
    assert got["tokens"] == want["tokens"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    # A directory holding the GGUF (what an edit of a GGUF writes) is the same model.
    edit_dir = tmp_path / "edit"
    edit_dir.mkdir()
    (edit_dir / "tiny.gguf").write_bytes(t["gguf"].read_bytes())
    assert perplexity(edit_dir, t["text"], tokenizer=t["hf"])["loss"] == got["loss"]


def test_an_adapter_scores_as_the_merged_model(tiny_llama, tmp_path):
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    from diffract_spectral.eval.clm import perplexity

    t = tiny_llama
    base = transformers.AutoModelForCausalLM.from_pretrained(t["hf"])
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                     init_lora_weights=False))
    lora.save_pretrained(tmp_path / "adapter")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(t["hf"])
    (tmp_path / "adapter" / "adapter_config.json").write_text(json.dumps(cfg))
    lora.merge_and_unload().save_pretrained(tmp_path / "merged")
    transformers.AutoTokenizer.from_pretrained(t["hf"]).save_pretrained(tmp_path / "merged")
    got = perplexity(tmp_path / "adapter", t["text"])  # the tokenizer comes from the base
    want = perplexity(tmp_path / "merged", t["text"])
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-5)
    base_loss = perplexity(t["hf"], t["text"])["loss"]
    assert abs(got["loss"] - base_loss) > 100 * abs(got["loss"] - want["loss"])  # the adapter was applied
