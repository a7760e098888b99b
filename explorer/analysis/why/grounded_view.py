"""The grounded head labels of the weights on screen, as the page and the API answer them.

``grounded_json(cfg, weights)`` is ``grounded.grounded_labels(...).to_json()`` plus ``source``: the circuit card
stored beside a shipped model when ``weights`` are that model as trained (a bundle, or a checkpoint shipped in a
folder; read at once, ``cards.load_card``), else computed on the probes (``probes.make_probes``: the tokens the
weights read, bytes or a checkpoint's tokenizer; the natural probe in windows of the model's length, at most
``patching.HELDOUT_WINDOW``), memoised by config and weights digest and holding its predicted bytes in the
server's memory pool like every analysis (``explorer.analysis.common.memo``).
"""

from __future__ import annotations

from explorer.analysis.common.memo import eval_model, memo, weights_key
from explorer.analysis.surgery.loss import heldout_text
from explorer.analysis.weights.trained import TrainedWeights
from explorer.analysis.why.grounded import grounded_labels
from explorer.analysis.why.patching import HELDOUT_WINDOW
from explorer.analysis.why.probes import LABEL_DISTANCES, NATURAL_WINDOWS, REPEAT_BATCH, REPEAT_LENGTH, make_probes
from explorer.runtime import budget
from explorer.runtime.configs import as_config
from explorer.runtime.device import device, gpu
from models import ConfigError
from models.interventions import check_model

STORED = "the circuit card stored beside the model (the same probes, computed once)"
COMPUTED = "computed on the fixed probes for these weights"


def encoder(tokenizer):
    """bytes -> the ids the weights read: the bytes themselves, or a checkpoint's tokenizer's ids."""
    if tokenizer is None:
        return list
    return lambda data: tokenizer.encode(data.decode("utf-8", errors="ignore"))


def length_of(cfg) -> int:
    """The natural probe's window: the bundles' trained length, or the model's own when shorter."""
    return min(HELDOUT_WINDOW, int(cfg.max_len)) if getattr(cfg, "max_len", None) else HELDOUT_WINDOW


def stored_card(cfg, weights: TrainedWeights | None) -> dict | None:
    """The stored card of the shipped model ``weights`` are, as trained (None: another model, a surgery, a card
    that fails its checks)."""
    from explorer.analysis.why.cards import load_card

    name = "" if weights is None or weights.surgery else (weights.bundle or weights.checkpoint)
    if not name or weights.config != cfg:
        return None
    try:
        card = load_card(name)
    except ConfigError:
        return None
    return None if card.get("skipped") or card["architecture"]["n_layers"] != cfg.n_layers else card


@gpu(duration=60)
def compute_grounded(cfg, weights: TrainedWeights | None) -> dict:
    """The grounded labels of ``cfg`` with ``weights`` (None: initial), computed (a GPU function)."""
    model = eval_model(cfg, weights)
    tokenizer = None if weights is None else weights.tokenizer
    probes = make_probes(encoder(tokenizer), heldout_text(), length_of(cfg)).to(device())
    return grounded_labels(model, probes).to_json()


def grounded_json(cfg, weights: TrainedWeights | None = None) -> dict:
    """The grounded labels of the weights on screen (module docstring), with ``source`` saying where from."""
    cfg = as_config(cfg)
    check_model(cfg)
    card = stored_card(cfg, weights)
    if cfg.architecture == "encoder_decoder":  # roles by the reversal card (explorer.analysis.why.cards.seq2seq)
        if card is None or card.get("task") != "reverse":
            raise ConfigError(
                "architecture",
                cfg.architecture,
                "the encoder-decoder bundle as trained for head "
                "roles: an encoder-decoder's roles (cross-attention heads reading the mirrored "
                "source position) are read on reversal probes, stored for that bundle only",
            )
        return {
            **{k: card[k] for k in ("heads", "groups", "baseline", "min_effect")},
            "thresholds": {"mirror_score": card["seq2seq_probes"]["mirror_score"]},
            "stack": "decoder cross-attention",
            "unit": "nats per token",
            "source": STORED,
        }
    if card is not None:
        return {
            **{k: card[k] for k in ("heads", "groups", "baseline", "min_effect", "thresholds")},
            "unit": "nats per token",
            "source": STORED,
        }
    L = length_of(cfg)
    need = max(
        budget.check(cfg, "attention", L, NATURAL_WINDOWS),
        budget.check(cfg, "attention", REPEAT_LENGTH, REPEAT_BATCH * len(LABEL_DISTANCES)),
    )
    out = memo(("grounded", cfg, weights_key(weights)), lambda: compute_grounded(cfg, weights), need=need)
    return {**out, "source": COMPUTED}
