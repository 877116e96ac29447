"""NomicBERT, GTE and jina-embeddings-v3 (model/families/rotary.py): what their rows in the family table
(tests/helpers/family_cases.py; tests/model/test_families.py compares their states, maps, pooled vectors and head
logits with transformers' at a tiny and a realistic shape) rest on. The axes the equality rests on are really set in
the references (no biases, GTE's bias on down_proj only, rotary scaling that moves the frequencies), so it is not
vacuous, and without the scaling the encoder differs; the rotary scaling equals transformers' rope functions;
checkpoints in transformers' module names load too; the family's tokenizer class tokenises as tokenizer.json; rope
types and scaling fields it does not implement are refused; a sentence-transformers folder over NomicBERT with its
prompts equals SentenceTransformer.encode.

Shape letters: B batch, T sequence, D hidden.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from safetensors.torch import load_file, save_file
from torch import Tensor
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.auto.tokenization_auto import TOKENIZER_MAPPING_NAMES

from model.config import EncoderConfig
from model.encoder import Encoder
from model.load import check_config, load_model
from model.positions import RotaryAngles
from model.tokenizer import pair_ids, token_ids
from tests.helpers.decoders import save_decoder
from tests.helpers.family_cases import CASES
from tests.helpers.family_checks import TOLERANCE, assert_body_matches, with_config
from tests.helpers.hub_repos import nomic_released
from tests.helpers.rotary import ROPE, batches, save_rotary
from tests.helpers.tokenizers import MULTILINGUAL

SCALED = [case.name for case in CASES if case.save is save_rotary and ROPE[case.name]["rope_type"] != "default"]


def test_the_references_set_the_axes_the_families_read(tmp_path: Path) -> None:
    """What the equality above rests on is really there: NomicBERT's projections have no bias, GTE's MLP has one
    on down_proj only, jina's has them all; GTE's rotary frequencies are scaled (linear: / 2) and the families'
    thetas are the configs' own."""
    nomic = save_rotary(tmp_path / "nomic", "nomic_bert").layers[0]
    assert all(m.bias is None for m in (*vars(nomic.self_attn)["_modules"].values(), *vars(nomic.mlp)["_modules"]
                                        .values()) if isinstance(m, torch.nn.Linear))
    gte_model = save_rotary(tmp_path / "gte", "gte")
    gte = gte_model.layers[0]
    assert gte.mlp.gate_proj.bias is None and gte.mlp.up_proj.bias is None and gte.mlp.down_proj.bias is not None
    assert gte.self_attn.q_proj.bias is not None and gte.self_attn.o_proj.bias is not None
    jina = save_rotary(tmp_path / "jina", "jina_v3").layers[0]
    assert jina.mlp.fc1.bias is not None and jina.self_attn.q_proj.bias is not None
    rotary = gte_model.rotary_emb
    unscaled = 1.0 / (ROPE["gte"]["rope_theta"] ** (torch.arange(0, 16, 2).float() / 16))  # head width 16
    assert rotary.rope_type == "linear" and torch.allclose(rotary.inv_freq, unscaled / 2)
    configs = {arch: load_model(tmp_path / name).encoder.config
               for arch, name in (("nomic_bert", "nomic"), ("gte", "gte"), ("jina_v3", "jina"))}
    assert not configs["nomic_bert"].attention_bias and not configs["nomic_bert"].ffn_bias
    gte_config = configs["gte"]
    assert (gte_config.ffn_bias, gte_config.ffn_down_bias, gte_config.rotary_scaling) == (False, True, "linear")
    assert [c.rotary_theta for c in configs.values()] == [500.0, 40_000.0, 700.0]
    assert all(c.norm_position == "post" and c.position_embedding == "none" for c in configs.values())


@pytest.mark.parametrize("arch", SCALED)
def test_without_the_scaling_the_encoder_differs(tmp_path: Path, arch: str) -> None:
    """The same weights with rotary_scaling default stray from transformers on the long inputs; dynamic scaling
    only past the original positions, so an input under them (6 tokens, under 128) is the same either way."""
    reference = save_rotary(tmp_path, arch, "Model", "realistic")
    loaded = load_model(tmp_path)
    unscaled = with_config(loaded.encoder, rotary_scaling="default", rotary_factor=1.0, rotary_original_length=0)
    for ids, mask in [*batches(loaded.tokenizer, "realistic"), batches(loaded.tokenizer, "tiny")[2]]:
        with torch.no_grad():
            states = reference(input_ids=ids, attention_mask=mask).last_hidden_state
            diff = (unscaled(ids, mask).token_states - states)[mask.bool()].abs().max()
        short = ids.size(1) < loaded.encoder.config.rotary_original_length
        assert (diff <= TOLERANCE) if arch == "gte-dynamic" and short else (diff > 10 * TOLERANCE), float(diff)


@pytest.mark.parametrize("rope_type,factor", [("linear", 2.0), ("dynamic", 4.0), ("dynamic", 1.5)])
def test_rotary_frequencies_equal_transformers_rope_functions(rope_type: str, factor: float) -> None:
    """model.positions.RotaryAngles against modeling_rope_utils: inverse frequencies at lengths under, at and past
    the original 100 positions, and a cos/sin factor of 1."""
    config = transformers.GteConfig(hidden_size=128, num_attention_heads=2, max_position_embeddings=100,
                                    rope_parameters={"rope_type": rope_type, "factor": factor, "rope_theta": 5000.0})
    angles = RotaryAngles(64, 5000.0, rope_type, factor, 100 if rope_type == "dynamic" else 0)
    for T in (7, 100, 101, 300):
        expected, attention_factor = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=T)
        ours = angles.frequencies(torch.arange(T, dtype=torch.float))  # (d_k / 2,)
        assert attention_factor == 1.0 and torch.allclose(ours, expected, rtol=1e-6, atol=0), T
        assert torch.equal(ours, angles.inv_freq) == (rope_type == "linear" or T <= 100)


def test_checkpoints_in_transformers_module_names_load_too(tmp_path: Path) -> None:
    """transformers saves these families under the released checkpoints' names (Wqkv, up_gate_proj, ...) and reads
    its own module names too: a checkpoint written in those loads the same; so does a GTE classifier whose body
    sits under new., as Alibaba's NewForSequenceClassification keeps it."""
    for arch in ("nomic_bert", "gte", "jina_v3"):
        reference = save_rotary(tmp_path / arch, arch)
        save_file({k: v.contiguous() for k, v in reference.state_dict().items()},
                  str(tmp_path / arch / "model.safetensors"))
        assert "layers.0.self_attn.q_proj.weight" in load_file(str(tmp_path / arch / "model.safetensors"))
        for ids, mask in batches(load_model(tmp_path / arch).tokenizer, "tiny")[:1]:
            assert_body_matches(load_model(tmp_path / arch).encoder, reference, ids, mask)
    reference = save_rotary(tmp_path / "new", "gte", "ForSequenceClassification")
    weights = load_file(str(tmp_path / "new" / "model.safetensors"))
    save_file({f"new.{k.removeprefix('gte.')}" if k.startswith("gte.") else k: v for k, v in weights.items()},
              str(tmp_path / "new" / "model.safetensors"))
    loaded = load_model(tmp_path / "new")
    ids, mask = batches(loaded.tokenizer, "tiny")[0]
    with torch.no_grad():
        assert (loaded.encoder(ids, mask).logits - reference(input_ids=ids, attention_mask=mask).logits).abs().max() \
            <= TOLERANCE


@pytest.mark.parametrize("arch", ["nomic_bert", "gte", "jina_v3"])
def test_the_family_tokenizer_class_tokenises_as_tokenizer_json(tmp_path: Path, arch: str) -> None:
    """transformers' tokenizer class for the model type (NomicBERT: BertTokenizer, a WordPiece kind; GTE and jina:
    XLMRobertaTokenizer, the Unigram kind; both kinds tests/model/test_tokenizers.py covers) over the family's
    tokenizer.json gives our ids, for texts and pairs (BERT's [SEP] and XLM-R's </s></s> templates)."""
    save_rotary(tmp_path, arch)
    model_type = json.loads((tmp_path / "config.json").read_text())["model_type"]
    name = TOKENIZER_MAPPING_NAMES[model_type]
    assert name == ("BertTokenizer" if arch == "nomic_bert" else "XLMRobertaTokenizer")
    ours = load_model(tmp_path).tokenizer
    theirs = getattr(transformers, name)(tokenizer_file=str(tmp_path / "tokenizer.json"))
    assert token_ids(ours, MULTILINGUAL, 512) == theirs(MULTILINGUAL, truncation=True, max_length=512)["input_ids"]
    pairs = list(zip(MULTILINGUAL, MULTILINGUAL[::-1], strict=True))
    expected = theirs([a for a, _ in pairs], [b for _, b in pairs], truncation=True, max_length=40)
    assert pair_ids(ours, pairs, 40)[0] == expected["input_ids"]


@pytest.mark.parametrize("rope,message", [
    ({"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}, "rope_type 'yarn' is not supported; supported: default, "
                                                              "linear, dynamic"),
    ({"rope_type": "llama3", "factor": 8.0, "rope_theta": 1e4, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 32}, "rope_type 'llama3' is not supported"),
    ({"rope_type": "linear", "rope_theta": 1e4}, "needs a factor"),
])
def test_rope_types_it_does_not_implement_are_refused(tmp_path: Path, rope: dict, message: str) -> None:
    save_rotary(tmp_path, "gte")
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_parameters": rope}))
    with pytest.raises(ValueError, match=message):
        load_model(tmp_path)


def test_decoders_still_refuse_scaled_rope(tmp_path: Path) -> None:
    """The decoder families read no rotary scaling: a linear rope type there is refused, not silently dropped."""
    save_decoder(tmp_path, "llama")
    config = json.loads((tmp_path / "config.json").read_text())
    rope = {"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0}
    (tmp_path / "config.json").write_text(json.dumps({**config, "rope_parameters": rope}))
    with pytest.raises(ValueError, match="rope_type 'linear' is not supported; supported: default"):
        load_model(tmp_path)


@pytest.mark.parametrize("fields,message", [
    (dict(rotary_theta=1e4, rotary_scaling="yarn"), "rotary_scaling must be one of default, linear, dynamic"),
    (dict(rotary_scaling="linear", rotary_factor=2.0), "needs rotary positions"),
    (dict(rotary_theta=1e4, rotary_factor=2.0), "rotary_factor must be positive, and 1 without rotary scaling"),
    (dict(rotary_theta=1e4, rotary_scaling="linear", rotary_factor=0.0), "rotary_factor must be positive"),
    (dict(rotary_theta=1e4, rotary_scaling="dynamic", rotary_factor=2.0), "rotary_original_length"),
    (dict(rotary_theta=1e4, rotary_scaling="linear", rotary_factor=2.0, rotary_original_length=8),
     "rotary_original_length"),
])
def test_config_checks_the_scaling_axis(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EncoderConfig(**fields)  # type: ignore[arg-type]


def test_a_config_saved_before_the_axes_builds_the_same_network() -> None:
    """Defaults: no scaling, and the down projection's bias as ffn_bias says."""
    old = EncoderConfig.from_dict({"rotary_theta": 1e4, "ffn_bias": False, "gated_ffn": True})
    assert (old.rotary_scaling, old.rotary_factor, old.rotary_original_length) == ("default", 1.0, 0)
    encoder = Encoder(old)
    assert encoder.blocks[0].ffn.down.bias is None and encoder.rotary is not None
    assert torch.equal(encoder.rotary["full"].inv_freq, 1.0 / 1e4 ** (torch.arange(0, 32, 2).float() / 32))


PROMPTS = {"search_query": "search_query: ", "search_document": "search_document: ", "clustering": "clustering: "}


def test_nomic_sentence_transformers_folder_with_prompts_matches_encode(tmp_path: Path) -> None:
    """nomic-embed-text's layout: NomicBERT under mean pooling and Normalize with its search_query / search_document
    prompts; our embeddings of the prompted texts equal SentenceTransformer(dir).encode(prompt_name=...)."""
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    save_rotary(tmp_path / "hf", "nomic_bert")
    transformer = Transformer(str(tmp_path / "hf"), max_seq_length=48)
    modules = [transformer, Pooling(transformer.get_embedding_dimension(), pooling_mode="mean"), Normalize()]
    SentenceTransformer(modules=modules, prompts=PROMPTS).save(str(tmp_path / "st"))
    reference = SentenceTransformer(str(tmp_path / "st"), device="cpu", model_kwargs={"attn_implementation": "eager"})
    loaded = load_model(tmp_path / "st")
    assert loaded.kind == "sentence-transformers" and loaded.prompts.items() >= PROMPTS.items()  # ST adds empty ones
    assert (loaded.encoder.config.pooling, loaded.encoder.config.normalize) == ("mean", True)
    texts = [*MULTILINGUAL, " ".join(MULTILINGUAL)]  # the last is cut at max_seq_length
    for name in ("search_query", "search_document"):
        ids, mask = pad_texts(loaded, [PROMPTS[name] + t for t in texts])
        with torch.no_grad():
            ours = loaded.encoder(ids, mask).embedding  # (B, D)
        theirs = reference.encode(texts, prompt_name=name, convert_to_tensor=True)
        assert (ours - theirs).abs().max() <= TOLERANCE


def pad_texts(loaded, texts: list[str]) -> tuple[Tensor, Tensor]:  # type: ignore[no-untyped-def]
    from model.tokenizer import encode

    return encode(loaded.tokenizer, texts, loaded.encoder.config.serving_length)  # (B, T) each


def test_nomics_released_config_reads_as_transformers_names(tmp_path: Path) -> None:
    """nomic-embed's config.json as its custom code writes it (n_embd, n_head, rotary_emb_base, ...) loads as the
    same model as transformers' names; a switch only that code implements is refused from config.json alone."""
    reference = save_rotary(tmp_path, "nomic_bert")
    released = nomic_released(json.loads((tmp_path / "config.json").read_text()))
    (tmp_path / "config.json").write_text(json.dumps(released))
    loaded = load_model(tmp_path)
    ids, mask = batches(loaded.tokenizer, "tiny")[0]
    assert_body_matches(loaded.encoder, reference, ids, mask)
    (tmp_path / "config.json").write_text(json.dumps({**released, "rotary_emb_fraction": 0.5}))
    with pytest.raises(ValueError, match="nomic_bert rotary_emb_fraction 0.5 is not supported"):
        check_config(tmp_path)


def test_jinas_released_config_is_read_as_jinas_before_its_weights(tmp_path: Path) -> None:
    """jina-embeddings-v3 as released says model_type xlm-roberta with rotary positions and its tasks
    (lora_adaptations): check_config (what attnserve pull asks before fetching weights) reads it as the jina family,
    rotary_emb_base as its theta; an xlm-roberta config with rotary positions and no tasks is another model of that
    custom code, still refused from config.json alone, rather than by the weight table after the download."""
    from model.families import family_of

    save_rotary(tmp_path, "jina_v3")
    config = json.loads((tmp_path / "config.json").read_text())
    released = {**{k: v for k, v in config.items() if k != "rope_parameters"}, "model_type": "xlm-roberta",
                "architectures": ["XLMRobertaModel"], "position_embedding_type": "rotary", "rotary_emb_base": 900.0}
    (tmp_path / "config.json").write_text(json.dumps({**released, "lora_adaptations": ["text-matching"]}))
    check_config(tmp_path)
    read = json.loads((tmp_path / "config.json").read_text())
    family, kind = family_of(read)
    assert (family.name, kind, family.config(read)["rotary_theta"]) == ("jina", "none", 900.0)
    (tmp_path / "config.json").write_text(json.dumps(released))
    with pytest.raises(ValueError, match="position_embedding_type 'rotary' is not supported"):
        check_config(tmp_path)
