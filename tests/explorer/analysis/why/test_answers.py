"""The Why tab's answers (``explorer.analysis.why.answers``: inputs checked and capped, each view memoised) on
the default bundle and the landing text, and on a checkpoint read through its tokenizer: the induction heads
carry the second copy of the repeated word, caps and bad values are refused naming the field."""

import types

import numpy as np
import pytest
import torch

from explorer.analysis import source
from explorer.analysis.why import answers as wv
from explorer.analysis.why import head_labels as wh
from explorer.analysis.why.patching import default_pair
from explorer.runtime.configs import app_config
from explorer.runtime.text import DEFAULT_TEXT
from models import ConfigError
from models.interventions import Interventions


@pytest.fixture(scope="module")
def src():
    return source.resolve("bundled", app_config(""))


def test_the_induction_heads_carry_the_second_copy(src):
    """On the landing text the layer-1 heads push the second copy's next byte, and zeroing them raises the loss."""
    attr = wv.attribution(src, DEFAULT_TEXT)
    layer1, others = np.array(attr["heads"][1]), np.abs(np.array(attr["heads"][2:]))
    assert attr["token"] == "q" and layer1.sum() > 4 * others.sum()
    abl = wv.ablation(src, DEFAULT_TEXT, ["1.0", "1.1", "1.2", "1.3"], "zero")
    assert abl["text"]["change"] > 0.5
    # the second copy's bytes after its first, predicted at the positions before them: a plain forward's loss
    second = DEFAULT_TEXT.index("Xq7Rv9Lm2", DEFAULT_TEXT.index("Xq7Rv9Lm2") + 1)
    assert abl["repeat"]["positions"] == list(range(second, second + 8))
    model = src.weights.eval_model(src.config).eval()
    ids = torch.tensor([list(DEFAULT_TEXT.encode())])
    zero = Interventions(replace_heads={(1, h): "zero" for h in range(4)})
    for record, key in ((None, "before"), (zero, "after")):
        with torch.no_grad():
            logp = torch.log_softmax(model(ids, interventions=record).logits[0].float(), -1)
        ref = -logp[second : second + 8].gather(1, ids[0, second + 1 : second + 9, None]).mean()
        assert abl["repeat"][key] == pytest.approx(float(ref), abs=1e-5)
    assert abl["repeat"]["before"] < 0.1 and abl["repeat"]["after"] > 3  # the induction heads carry the copy


def test_caps_and_bad_values_name_the_field(src):
    cfg = src.config
    with pytest.raises(ConfigError, match="position"):
        wv.position_of(200, 20, 3)
    assert wv.position_of(-1, 20, 3) == 3 and wv.position_of("", 20, 3) == 3 and wv.position_of(18, 20, 3) == 18
    with pytest.raises(ConfigError, match="at most 32 heads"):
        wh.parse_heads(["0.0"] * 33, cfg)
    with pytest.raises(ConfigError, match=r"heads.*layer in 0\.\.3"):
        wh.parse_heads(["4.0"], cfg)
    assert wh.parse_heads("1.2, 0.1,1.2", cfg) == [(0, 1), (1, 2)]
    with pytest.raises(ConfigError, match="alternative"):
        wv.alternative_id(src, "ab")
    assert wv.alternative_id(src, "Z") == ord("Z") and wv.alternative_id(src, "") is None
    with pytest.raises(ConfigError, match="patching"):
        wv.check_patching(types.SimpleNamespace(n_layers=12, n_heads=16))
    wv.check_patching(types.SimpleNamespace(n_layers=4, n_heads=4))
    with pytest.raises(ConfigError) as e:
        wv.patching(src, "abcdef", "abc")
    # what is wrong (the text, its length) and what is accepted (the clean text's length)
    assert str(e.value) == (
        "corrupted='abc (3 tokens)' is not valid: a text of the same number of tokens as the clean text (6): "
        "patching swaps activations position by position"
    )
    with pytest.raises(ConfigError, match="mode"):
        wv.ablation(src, "abcdef", ["0.0"], "half")
    with pytest.raises(ConfigError, match="kind"):
        wv.circuits(src, "", "X")
    with pytest.raises(ConfigError, match=r"later.*a layer after earlier=2"):
        wv.circuits(src, "", "K", 2, 1)
    with pytest.raises(ConfigError, match=r"earlier.*0\.\.3"):
        wv.circuits(src, "", "K", "x", 1)


@pytest.fixture
def tiny_source(tmp_path, monkeypatch):
    """A pretrained-format Llama with a BPE tokenizer (``tests/tiny_checkpoint.py``), resolved as the page does."""
    from tiny_checkpoint import make_checkpoint

    from explorer.analysis.weights import checkpoints

    make_checkpoint(tmp_path / "tiny")
    monkeypatch.setenv(checkpoints.ROOTS_ENV, str(tmp_path))
    checkpoints._LOADED.clear()
    loaded = checkpoints.load("tiny")
    yield source.resolve(source.checkpoint_choice("tiny"), loaded.config, loaded=loaded)
    checkpoints._LOADED.clear()


def test_a_checkpoint_reads_its_tokenizer_pieces(tiny_source):
    tok = tiny_source.tokenizer
    ids = tok.encode(DEFAULT_TEXT)
    lens = wv.lens(tiny_source, DEFAULT_TEXT)
    assert lens["token_ids"] == ids and lens["tokens"] == [str(p) for p in tok.pieces(ids)]
    assert len(ids) < len(DEFAULT_TEXT.encode())  # tokens, not bytes
    bad = tok.encode(default_pair(DEFAULT_TEXT)[1])
    assert len(bad) != len(ids)  # the tokenizer splits the changed word otherwise: the default is made per token
    patch = wv.patching(tiny_source, DEFAULT_TEXT)
    assert patch["checks"]["everything_patched"] == pytest.approx(1.0, abs=1e-6)
    run = tok.encode(patch["corrupted_text"])
    assert len(run) == len(ids) and patch["positions"] == [i for i in range(len(ids) - 1) if ids[i + 1] != run[i + 1]]
    circ = wv.circuits(tiny_source, DEFAULT_TEXT)  # vocabulary 400: the text's most frequent tokens
    assert len(circ["copying"]["tokens"]) == len(set(ids)) and len(circ["composition"]["scores"]) == 4
    with pytest.raises(ConfigError, match="exactly one token"):
        wv.alternative_id(tiny_source, "Xq7Rv9Lm2 again")
