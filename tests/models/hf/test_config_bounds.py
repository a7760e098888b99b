"""Every size of a checkpoint's config.json is bounded by the catalogue's ranges before any family code runs
(``models.hf.sizes``), and every JSON value of the files the loader parses is bounded (``models.hf.strict_json``):
a crafted config is refused by name before anything loops, allocates or converts by an absurd value."""

import json
import shutil
import signal
from contextlib import contextmanager

import pytest
import torch
from safetensors.torch import save_file

from models import ConfigError
from models.config import SIZE_RANGES
from models.hf import loader, plan, sizes
from models.hf.fields import Fields

# the tiny checkpoints of tests/models/hf/hf_models.py and the loader family each is read by
HF_FAMILIES = {
    "gpt2": "gpt2",
    "llama": "llama",
    "smollm": "llama",
    "mistral": "llama",
    "qwen2": "llama",
    "qwen3": "qwen3",
    "olmo2": "olmo2",
    "bert": "bert",
    "t5": "t5",
}
CASES = [(hf, key) for hf, fam in HF_FAMILIES.items() for key in sizes.table(loader.FAMILIES[fam])]


@contextmanager
def hang_guard(seconds: float = 10.0):
    """Turn a hang (a loop of 2^40 steps holds the interpreter, not the alarm: Python runs the handler
    between bytecodes) into a failure instead of a stuck test run. Not a timing assertion."""

    def fail(*_):
        raise TimeoutError(f"still running after {seconds} s: the config was not refused before a loop")

    old = signal.signal(signal.SIGALRM, fail)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def tiny_folder(folder, config: dict, text: str | None = None):
    """A folder with ``config.json`` (``text`` verbatim when given) and a one-tensor model.safetensors: what
    an upload of a crafted config needs to reach the family code."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(text if text is not None else json.dumps(config))
    save_file({"model.embed_tokens.weight": torch.zeros(120, 32)}, str(folder / "model.safetensors"))
    return folder


QWEN2_BOMB = {
    "model_type": "qwen2",
    "hidden_size": 32,
    "num_attention_heads": 4,
    "num_hidden_layers": 1 << 40,
    "intermediate_size": 64,
    "vocab_size": 120,
    "use_sliding_window": True,
    "sliding_window": 4,
    "max_window_layers": 0,
}


def test_the_2_40_layer_qwen2_config_is_refused_before_the_family_reads_it(tmp_path, monkeypatch):
    folder = tiny_folder(tmp_path / "bomb", QWEN2_BOMB)
    assert len((folder / "config.json").read_bytes()) < 300  # the attack is a few hundred bytes
    with hang_guard(), pytest.raises(ConfigError) as e:
        plan(folder)
    assert e.value.field == "config.json: num_hidden_layers" and e.value.value == 1 << 40
    assert f"[1, {SIZE_RANGES['n_layers'][1]}]" in str(e.value)
    read = []
    monkeypatch.setattr(Fields, "integer", lambda self, key, *a, **k: read.append(key))
    with pytest.raises(ConfigError):
        plan(folder)
    assert read == []  # no family code read a single size


def test_qwen2_sliding_layers_follow_max_window_layers_without_a_loop(saved, tmp_path):
    """Which attention kinds the layers have, decided from the bounds, matches transformers' own per-layer
    list (``layer_types``) for each threshold."""
    from transformers import Qwen2Config

    src, _ = saved("qwen2")
    for first in (0, 1, 2, 5):  # 2 layers: all slide, mixed, all full, all full
        folder = tmp_path / f"first{first}"
        shutil.copytree(src, folder)
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(use_sliding_window=True, sliding_window=4, max_window_layers=first)
        cfg.pop("layer_types", None)
        (folder / "config.json").write_text(json.dumps(cfg))
        types = Qwen2Config(**{k: v for k, v in cfg.items() if k != "model_type"}).layer_types
        ours = plan(folder).config
        names = {"full_attention": "full", "sliding_attention": "sliding_window"}
        assert [ours.layer_config(i).attention for i in range(ours.n_layers)] == [names[t] for t in types], first
        assert bool(ours.layer_schedule) == (len(set(types)) > 1), first  # a schedule only where layers differ


@pytest.mark.parametrize("family,key", CASES)
@pytest.mark.parametrize("where", ["above", "below", "huge", "text"])
def test_every_size_past_its_range_is_refused_by_name_before_family_code(
    saved, tmp_path, monkeypatch, family, key, where
):
    lo, hi, _ = sizes.table(loader.FAMILIES[HF_FAMILIES[family]])[key]
    value = {"above": hi + 1, "below": lo - 1, "huge": 1 << 40, "text": str(hi)}[where]
    folder = tmp_path / family
    shutil.copytree(saved(family)[0], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))

    def family_code(*_):
        raise AssertionError("the family's code ran before the sizes were checked")

    monkeypatch.setattr(loader.FAMILIES[HF_FAMILIES[family]], "config", family_code)
    with pytest.raises(ConfigError) as e:
        plan(folder)
    assert e.value.field == f"config.json: {key}"
    assert f"[{lo}, {hi}]" in e.value.allowed


@pytest.mark.parametrize("family", sorted(HF_FAMILIES))
def test_every_size_a_family_reads_is_in_its_table(saved, monkeypatch, family):
    """The property the check rests on: each integer a family's code reads from config.json is a key the
    size check bounded first (a size read outside the table could still drive a loop)."""
    read = []
    original = Fields.integer
    monkeypatch.setattr(Fields, "integer", lambda self, key, *a, **k: read.append(key) or original(self, key, *a, **k))
    folder, hf = saved(family)
    cfg = json.loads((folder / "config.json").read_text())
    if family == "qwen2":  # the branch that reads max_window_layers
        cfg.update(use_sliding_window=True, sliding_window=4, max_window_layers=0)
    loader._config(HF_FAMILIES[family], Fields(cfg))
    table = sizes.table(loader.FAMILIES[HF_FAMILIES[family]])
    assert read and set(read) <= set(table), sorted(set(read) - set(table))


def test_sizes_at_the_range_limits_pass_the_size_check():
    for module in loader.FAMILIES.values():
        table = sizes.table(module)
        sizes.check(module, {key: lo for key, (lo, hi, _) in table.items()})
        sizes.check(module, {key: hi for key, (lo, hi, _) in table.items()})


# ------------------------------------------------------------------ model_type and absurd JSON values
@pytest.mark.parametrize("model_type", [["qwen2"], {"name": "llama"}, 7, True])
def test_a_model_type_that_is_not_a_string_is_refused_by_name(tmp_path, model_type):
    folder = tiny_folder(tmp_path / "m", {**QWEN2_BOMB, "model_type": model_type})
    with pytest.raises(ConfigError) as e:
        plan(folder)
    assert e.value.field == "config.json: model_type"
    assert all(name in e.value.allowed for name in sorted(loader.MODEL_TYPES))


@pytest.mark.parametrize(
    "literal,path,words",
    [
        ("9" * 5000, "vocab_size", ("5000 digits", "at most 20 digits")),
        ("-" + "1" * 30, "rope_scaling.factor", ("30 digits",)),
        ("NaN", "rms_norm_eps", ("NaN", "finite")),
        ("-Infinity", "rope_scaling.factor", ("Infinity", "finite")),
        ("1e999", "rope_theta", ("1e999", "finite")),
        ("0." + "1" * 100, "rms_norm_eps", ("102 characters",)),
        ('"' + "x" * 5000 + '"', "_name_or_path", ("5000 characters",)),
        ("[" * 40 + "]" * 40, "layer_types", ("nested",)),
        ("[" * 100000 + "]" * 100000, None, ("at most 32 levels",)),
    ],
    ids=["5000-digits", "30-digits", "nan", "infinity", "overflow", "long-float", "long-string", "deep", "deeper"],
)
def test_absurd_json_values_anywhere_are_refused_by_name(tmp_path, literal, path, words):
    """Each value sits where config.json puts it (top level or inside rope_scaling); the refusal names the
    file and the value's path before any of the config is used."""
    cfg = {**QWEN2_BOMB, "num_hidden_layers": 2, "rope_scaling": {"type": "linear", "factor": 2.0}}
    text = json.dumps(cfg)
    if path == "rope_scaling.factor":
        text = text.replace('"factor": 2.0', f'"factor": {literal}')
    else:
        text = text[:-1] + f', "{path or "x"}": {literal}}}'
    folder = tiny_folder(tmp_path / "j", {}, text=text)
    with hang_guard(), pytest.raises(ConfigError) as e:
        plan(folder)
    assert e.value.field == "config.json" if path is None else e.value.field.startswith(f"config.json: {path}")
    assert all(w in str(e.value) for w in words), str(e.value)


def test_a_long_key_and_too_many_objects_are_refused(tmp_path):
    for extra, words in (
        (f'"{"k" * 5000}": 1', ("keys of at most",)),
        ('"x": [' + ",".join(["{}"] * 70000) + "]", ("objects and lists",)),
    ):
        text = json.dumps({**QWEN2_BOMB, "num_hidden_layers": 2})[:-1] + ", " + extra + "}"
        folder = tiny_folder(tmp_path / str(len(text)), {}, text=text)
        with hang_guard(), pytest.raises(ConfigError) as e:
            plan(folder)
        assert e.value.field.startswith("config.json") and all(w in str(e.value) for w in words)


def test_ordinary_nesting_and_numbers_still_read(saved, tmp_path):
    """A config as transformers writes it, with nested task parameters and a 19-digit integer, loads."""
    folder = tmp_path / "t5"
    shutil.copytree(saved("t5")[0], folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["task_specific_params"] = {
        "translation_en_to_de": {"early_stopping": True, "max_length": 300, "prefix": "translate English to German: "}
    }
    cfg["seed_like"] = 2**63 - 1
    (folder / "config.json").write_text(json.dumps(cfg))
    assert plan(folder).family == "t5"


def test_an_index_naming_a_hundred_thousand_shards_is_refused_before_any_is_looked_for(tmp_path):
    """A 3 MB index of distinct shard names: refused at the shard cap (a list's membership test once made
    this loop quadratic: minutes of a compute slot for one upload)."""
    from models.hf.files import INDEX, MAX_SHARDS

    folder = tmp_path / "index"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(QWEN2_BOMB))
    (folder / INDEX).write_text(json.dumps({"weight_map": {f"t{i}": f"s{i}.safetensors" for i in range(100_000)}}))
    with hang_guard(), pytest.raises(ConfigError) as e:
        plan(folder)
    assert e.value.field == INDEX and f"at most {MAX_SHARDS} shards" in e.value.allowed
