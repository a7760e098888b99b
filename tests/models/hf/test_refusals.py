"""What the loader refuses, with a ConfigError that says why, and before anything large is allocated:
pickles (never opened), unknown architectures, absurd or crafted sizes, weights that do not fit the
config, NaN weights, and every setting the catalogue cannot express (refused by name)."""

import json
import pickle
import resource
import shutil
import struct

import pytest
import torch
from safetensors.torch import load_file, save_file

from models import ConfigError
from models.hf import load, plan


class _Trap:
    """Unpickling this creates a file: proof that a pickle was (or was not) opened."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return open, (self.path, "w")


def copy(saved, family, tmp_path):
    src, hf = saved(family)
    dst = tmp_path / family
    shutil.copytree(src, dst)
    return dst, hf


def edit_config(folder, **changes):
    path = folder / "config.json"
    cfg = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    path.write_text(json.dumps(cfg))


def edit_weights(folder, fn):
    path = folder / "model.safetensors"
    tensors = load_file(path)
    fn(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def refused(folder, *words, **kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(folder, **kw)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    return e.value


# ------------------------------------------------------------------ pickles
def test_pickle_only_folder_is_refused_and_never_opened(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    sentinel = tmp_path / "unpickled"
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps(_Trap(sentinel)))
    refused(tmp_path, "pytorch_model.bin", "pickle", "runs any code")
    refused(tmp_path / "pytorch_model.bin", "pickle")
    assert not sentinel.exists()


def test_pickle_beside_safetensors_is_ignored(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    sentinel = tmp_path / "unpickled"
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Trap(sentinel)))
    load(folder)
    assert not sentinel.exists()


# ------------------------------------------------------------------ architectures and settings
@pytest.mark.parametrize(
    "family,changes,words",
    [
        ("gpt2", {"model_type": "mamba"}, ("model_type='mamba'", "gpt2", "llama")),
        (
            "llama",
            {"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}},
            ("rope_scaling type 'longrope' is not supported",),
        ),
        (
            "llama",
            {"rope_parameters": None, "rope_scaling": {"type": "dynamic", "factor": 4.0}},
            ("rope_scaling type 'dynamic' is not supported",),
        ),
        ("llama", {"hidden_act": "relu2"}, ("hidden_act 'relu2' is not supported",)),
        ("llama", {"mlp_bias": True}, ("mlp_bias",)),
        # a head width of its own loads (test_head_dim_checkpoints.py); an odd one has no RoPE pairs
        ("llama", {"head_dim": 7}, ("head_dim", "even")),
        ("qwen3", {"hidden_act": "gelu"}, ("hidden_act 'gelu' is not supported",)),
        (
            "olmo2",
            {"rope_parameters": {"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
            ("partial_rotary_factor", "rope_fraction"),
        ),
        ("olmo2", {"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4, "factor": 2.0}}, ("'llama3'",)),
        # per-layer windows load (test_layer_windows.py); a kind of layer the catalogue has no key for does not
        ("qwen2", {"layer_types": ["full_attention", "chunked_attention"], "sliding_window": 4}, ("layer_types",)),
        ("qwen2", {"layer_types": ["full_attention"], "sliding_window": 4}, ("layer_types", "2 layers")),
        ("gpt2", {"activation_function": "quick_gelu"}, ("hidden_act 'quick_gelu' is not supported",)),
        ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, ("scale_attn_by_inverse_layer_idx",)),
        ("bert", {"position_embedding_type": "relative_key"}, ("position_embedding_type",)),
        ("t5", {"d_kv": 4}, ("d_kv",)),
        ("t5", {"feed_forward_proj": "gated-relu"}, ("gated-relu",)),
    ],
)
def test_settings_the_catalogue_cannot_express_are_refused_by_name(saved, tmp_path, family, changes, words):
    folder, _ = copy(saved, family, tmp_path)
    edit_config(folder, **changes)
    refused(folder, *words)


@pytest.mark.parametrize("value", ["32", 32.5, True, -4, [32], None])
def test_config_values_of_the_wrong_type_are_refused(saved, tmp_path, value):
    folder, _ = copy(saved, "llama", tmp_path)
    edit_config(folder, hidden_size=value)
    refused(folder, "hidden_size")


@pytest.mark.parametrize("text", ["{", "[]", '"x"', "\x00\xff"])
def test_config_that_is_no_json_object_is_refused(saved, tmp_path, text):
    folder, _ = copy(saved, "gpt2", tmp_path)
    (folder / "config.json").write_bytes(text.encode("latin-1"))
    refused(folder, "config.json")


# ------------------------------------------------------------------ sizes: refused before allocation
def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: kB


@pytest.mark.parametrize(
    "changes,words",
    [
        # 1.6 B parameters: within the library's limits, far above the interactive cap
        (
            {
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 24,
                "vocab_size": 32000,
                "num_attention_heads": 16,
                "num_key_value_heads": 16,
            },
            ("M parameters",),
        ),
        # ~10^13 parameters: refused by the catalogue's own size check
        (
            {
                "hidden_size": 65536,
                "intermediate_size": 262144,
                "num_hidden_layers": 512,
                "num_attention_heads": 64,
                "num_key_value_heads": 64,
            },
            ("d_model",),
        ),
        ({"hidden_size": 1 << 30}, ("d_model",)),
        ({"vocab_size": 1 << 40}, ("vocab_size",)),
    ],
)
def test_absurd_sizes_are_refused_without_allocating(saved, tmp_path, changes, words):
    folder, _ = copy(saved, "llama", tmp_path)
    edit_config(folder, head_dim=None, **changes)
    for _ in range(2):  # the second pass measures with every lazy import already done
        before = _peak_rss_bytes()
        with pytest.raises(ConfigError) as e:
            plan(folder)
        refused(folder, *words)
    assert _peak_rss_bytes() - before < 64 << 20  # a real build of the smallest of these needs > 6 GB
    assert all(w in str(e.value) for w in words)


def test_the_parameter_cap_is_the_callers(saved):
    folder, _ = saved("gpt2")
    n = plan(folder).n_params
    plan(folder, max_params=n)
    with pytest.raises(ConfigError, match="parameters"):
        plan(folder, max_params=n - 1)


# ------------------------------------------------------------------ weights that do not fit
def test_a_tensor_of_the_wrong_shape_is_refused_from_the_header(saved, tmp_path):
    folder, _ = copy(saved, "llama", tmp_path)
    edit_weights(folder, lambda t: t.update({"model.layers.1.mlp.up_proj.weight": torch.zeros(65, 32)}))
    err = refused(folder, "model.layers.1.mlp.up_proj.weight", "[65, 32]", "[64, 32]")
    assert err.field == "weights"


def test_a_config_that_does_not_match_its_weights_is_refused(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    edit_config(folder, n_embd=64)
    refused(folder, "wte.weight")


def test_a_missing_tensor_is_refused(saved, tmp_path):
    folder, _ = copy(saved, "qwen2", tmp_path)
    edit_weights(folder, lambda t: t.pop("model.layers.0.self_attn.k_proj.bias"))
    refused(folder, "layers.0.self_attn.k_proj.bias", "missing")


def test_an_unexpected_tensor_is_refused_not_dropped(saved, tmp_path):
    folder, _ = copy(saved, "llama", tmp_path)
    edit_weights(folder, lambda t: t.update({"model.layers.0.self_attn.q_norm.weight": torch.ones(8)}))
    refused(folder, "q_norm", "unexpected")


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(saved, tmp_path, bad):
    folder, _ = copy(saved, "bert", tmp_path)

    def poison(t):
        t["bert.encoder.layer.1.output.dense.weight"][3, 5] = bad

    edit_weights(folder, poison)
    refused(folder, "bert.encoder.layer.1.output.dense.weight", "NaN or Inf")


def test_integer_tensors_are_refused(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    edit_weights(folder, lambda t: t.update({"transformer.wpe.weight": torch.zeros(64, 32, dtype=torch.int32)}))
    refused(folder, "I32", "floating")


def test_a_header_whose_offsets_lie_is_refused(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header["transformer.wte.weight"]["shape"] = [100000, 32]  # claims far more than the file holds
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    refused(folder, "transformer.wte.weight", "data offsets")


def test_an_index_naming_a_file_outside_the_folder_is_refused(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    (folder / "model.safetensors").rename(folder / "model-00001-of-00001.safetensors")
    index = {"metadata": {}, "weight_map": {"transformer.wte.weight": "../model-00001-of-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    refused(folder, "plain .safetensors file names")


def test_a_tokenizer_larger_than_the_vocabulary_is_refused(saved, tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder, _ = copy(saved, "gpt2", tmp_path)
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(500)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
    refused(folder, "tokenizer.json", "500 tokens", "vocab_size=120")


def test_huge_finite_weights_are_not_mistaken_for_inf():
    from models.hf.mapping import finite

    assert finite(torch.full((1000,), 3e38))  # its float32 sum overflows; every value is finite
    assert not finite(torch.tensor([1.0, float("nan")])) and not finite(torch.tensor([float("inf"), -1e38]))


def _rewrite_header(path, change):
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    body = change(header, data[8 + n :])
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + body)


def _shift(name, by):
    def change(header, body):
        header[name]["data_offsets"] = [o + by for o in header[name]["data_offsets"]]
        return body

    return change


def _swap(a, b):
    def change(header, body):  # the two tensors' bytes change places, and so do their offsets: still a tiling
        (sa, ea), (sb, eb) = header[a]["data_offsets"], header[b]["data_offsets"]
        assert ea == sb
        header[b]["data_offsets"], header[a]["data_offsets"] = [sa, sa + eb - sb], [sa + eb - sb, eb]
        return body[:sa] + body[sb:eb] + body[sa:ea] + body[eb:]

    return change


def _first_two(folder):
    data = (folder / "model.safetensors").read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = {k: v for k, v in json.loads(data[8 : 8 + n]).items() if k != "__metadata__"}
    ordered = sorted(header, key=lambda k: header[k]["data_offsets"][0])
    return ordered[0], ordered[1], header


@pytest.mark.parametrize("case", ["overlap", "gap", "trailing", "swapped", "metadata"])
def test_safetensors_offsets_are_checked_as_safetensors_checks_them(saved, tmp_path, case):
    """Offsets must tile the data section (in start order, each tensor where the one before ends, the last at
    the file's end): a plan that passes is a file ``safetensors`` opens, and a refused one is a file it
    refuses. Tensors stored in another order than their names (swapped) are fine for both."""
    from safetensors import SafetensorError, safe_open

    folder, _ = copy(saved, "gpt2", tmp_path)
    path = folder / "model.safetensors"
    original = load(folder).model.state_dict()
    a, b, header = _first_two(folder)
    size_a = header[a]["data_offsets"][1] - header[a]["data_offsets"][0]
    change = {
        "overlap": _shift(b, -min(4, size_a)),  # b starts inside a
        "gap": lambda h, body: _gap(h, body, b),
        "trailing": lambda h, body: body + b"\0" * 8,
        "swapped": _swap(a, b),
        "metadata": lambda h, body: h.update({"__metadata__": {"format": 1}}) or body,
    }[case]
    _rewrite_header(path, change)
    try:
        with safe_open(str(path), framework="pt") as f:
            reference = {k: f.get_tensor(k) for k in f.keys()}
    except SafetensorError:
        reference = None
    if reference is None:
        with pytest.raises(ConfigError) as e:
            plan(folder)
        assert "model.safetensors" in e.value.field
        if case in ("overlap", "gap"):
            assert b in e.value.field and "start where the tensor before ends" in e.value.allowed
    else:
        assert case == "swapped"
        moved = load(folder).model.state_dict()  # each tensor read where the header says it now is
        assert moved.keys() == original.keys() and all(torch.equal(moved[k], original[k]) for k in original)


def _gap(header, body, name):
    """``name`` and every tensor after it move 4 bytes later, 4 unused bytes before it."""
    start = header[name]["data_offsets"][0]
    for entry in header.values():
        if isinstance(entry, dict) and "data_offsets" in entry and entry["data_offsets"][0] >= start:
            entry["data_offsets"] = [o + 4 for o in entry["data_offsets"]]
    return body[:start] + b"\0" * 4 + body[start:]


def test_a_5000_digit_integer_in_a_safetensors_header_is_refused_by_name(saved, tmp_path):
    folder, _ = copy(saved, "gpt2", tmp_path)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    raw = data[8 : 8 + n].replace(b'"data_offsets":[0,', b'"data_offsets":[' + b"1" * 5000 + b",", 1)
    assert raw != data[8 : 8 + n]
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + data[8 + n :])
    refused(folder, "model.safetensors header", "5000 digits")
