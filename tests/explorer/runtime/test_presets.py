"""The presets for the models the catalogue's papers name: each one validates within the
app's limits, selects the paper's variant, runs forward and backward with finite, non-zero gradients,
fills every control through the preset handler and is recognised again from the filled config."""

import pytest
import torch

from explorer.app.controls.fields import CONTROL_FIELDS, values_to_config
from explorer.app.controls.sources import apply_preset
from explorer.runtime.configs import app_config
from explorer.runtime.presets import PRESETS, available, matching_preset, preset_config
from models import build_model

# preset -> the registry choices that make it that paper's model (the independent reference)
PAPER_PRESETS = {
    "Informer encoder (2021)": {"attention": "probsparse"},
    "Funnel-Transformer (2020)": {"layer": "funnel"},
    "Lite Transformer (2020)": {"attention": "lite", "d_ff": 128},
    "Set Transformer (2019)": {"attention": "isab", "causal": False},
    "Luna-16 (2021)": {"attention": "luna", "n_inducing": 16},
    "Feedback Transformer (2020)": {"layer": "feedback", "causal": True},
    "Macaron Net (2019)": {"layer": "macaron"},
    "Sandwich Transformer (2020)": {"layer": "sandwich"},
    "DeBERTa (2021)": {"position": "deberta", "architecture": "encoder_only"},
    "TUPE-R (2021)": {"position": "tupe", "tupe_relative": True},
    "kNN-LM (2020)": {"memory": "knn_lm", "knn_lambda": 0.25},
    "SPALM (2021)": {"memory": "spalm"},
    "Poolingformer (2021)": {"attention": "poolingformer"},
    "RealFormer (2020)": {"attention": "realformer"},
    "Sinkhorn Transformer (2020)": {"attention": "sinkhorn"},
    "Axial Transformer (2019)": {"attention": "axial"},
    "Synthesizer (2021)": {"attention": "synthesizer_dense"},
    "Transformer-PN (2020)": {"norm": "powernorm"},
}


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_preset_validates_and_is_the_papers_model(name):
    assert name in available()
    cfg = app_config(preset_config(name))
    for field, value in PAPER_PRESETS[name].items():
        assert getattr(cfg, field) == value, field
    assert matching_preset(cfg) == name
    assert PRESETS[name][0].strip()  # a description for the docs and the dropdown's reader


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_preset_runs_with_gradients(name):
    cfg = preset_config(name)
    model = build_model(cfg)
    tokens = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(0))
    out = model(tokens)
    assert out.logits.shape == (2, 48, cfg.vocab_size)
    loss = (
        torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, cfg.vocab_size), tokens[:, 1:].reshape(-1))
        + out.aux_loss
    )
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_preset_fills_every_control(name):
    out = apply_preset(name)
    assert set(CONTROL_FIELDS) <= set(out) and out["preset"] == name
    values = {n: out[n]["value"] for n in CONTROL_FIELDS}
    assert values_to_config(values) == preset_config(name)


# ---------------------------------------------------------------------------- lessons
def test_lesson_presets_bring_a_text_at_which_the_pattern_shows():
    """On the lesson's text, the sparse pattern keeps well under half of what full attention keeps
    (on the 100-byte default text BigBird kept 49.9% of pairs against full's 50.5%)."""
    from explorer.app.controls.sources import apply_preset
    from explorer.runtime.limits import MAX_TEXT_BYTES
    from explorer.runtime.presets import LESSON_TEXT, LESSONS
    from models.attention import pattern_mask

    L = len(LESSON_TEXT.encode())
    assert 200 < L <= MAX_TEXT_BYTES
    for name in ("Lesson: BigBird vs full attention (256 bytes)", "Lesson: sliding window vs full (256 bytes)"):
        cfg = preset_config(name)
        sparse = pattern_mask(cfg, L).float().mean().item()
        full = pattern_mask(cfg.replace(attention="full"), L).float().mean().item()
        assert sparse < 0.5 * full, (name, sparse, full)
        out = apply_preset(name)
        assert out["text"] == LESSON_TEXT and out["attention"]["value"] == cfg.attention
    assert set(LESSONS) <= set(available())


def test_the_gradient_lesson_is_deep_and_post_ln_and_keeps_the_text():
    import gradio as gr

    from explorer.app.controls.sources import apply_preset

    cfg = preset_config("Lesson: post-LN vs pre-LN gradients (12 layers)")
    assert cfg.n_layers == 12 and cfg.norm_placement == "post"
    assert apply_preset("Lesson: post-LN vs pre-LN gradients (12 layers)")["text"] == gr.skip()
