"""The Why tab's head labels: "L.H", or an encoder-decoder's "self L.H" (decoder self-attention), "cross L.H"
(cross-attention) and "enc L.H" (encoder); parsing a visitor's pick (capped, refused by ``ConfigError`` naming
``heads``), every head's label, and the heads ablated by default."""

from __future__ import annotations

from explorer.analysis.why.patching import KINDS
from explorer.analysis.why.seq2seq_ids import seq2seq
from models import ConfigError

MAX_ABLATED = 32  # heads ablated at once

LABEL_KINDS = {"self": "self", "cross": "cross", "enc": "encoder"}  # an encoder-decoder's head label prefixes


def depths(cfg) -> dict:
    """Layers of each kind of head: ``self`` (a single stack's, or the decoder's), and for an encoder-decoder
    ``cross`` and ``encoder``."""
    from models.architectures import decoder_config, encoder_config

    if not seq2seq(cfg):
        return {"self": cfg.n_layers}
    dec = decoder_config(cfg).n_layers
    return {"self": dec, "cross": dec, "encoder": encoder_config(cfg).n_layers}


def parse_heads(value, cfg) -> list:
    """Head labels "L.H" (a list, or one string separated by commas) -> sorted ``(layer, head)`` pairs; an
    encoder-decoder's "self L.H", "cross L.H", "enc L.H" -> ``(kind, layer, head)``."""
    if seq2seq(cfg):
        return _parse_seq2seq_heads(value, cfg)
    items = value.split(",") if isinstance(value, str) else list(value or [])
    valid = f"labels 'layer.head' with layer in 0..{cfg.n_layers - 1} and head in 0..{cfg.n_heads - 1}"
    if len(items) > MAX_ABLATED:
        raise ConfigError("heads", f"{len(items)} heads", f"at most {MAX_ABLATED} heads at once")
    out = set()
    for item in items:
        try:
            layer, head = (int(x) for x in str(item).strip().split("."))
        except ValueError:
            raise ConfigError("heads", str(item)[:20], valid) from None
        if not (0 <= layer < cfg.n_layers and 0 <= head < cfg.n_heads):
            raise ConfigError("heads", str(item)[:20], valid)
        out.add((layer, head))
    if not out:
        raise ConfigError("heads", "none", f"at least one head: {valid}")
    return sorted(out)


def _parse_seq2seq_heads(value, cfg) -> list:
    items = value.split(",") if isinstance(value, str) else list(value or [])
    depth = depths(cfg)
    valid = (
        f"labels 'self L.H', 'cross L.H' (decoder layer L in 0..{depth['self'] - 1}) or 'enc L.H' (encoder "
        f"layer L in 0..{depth['encoder'] - 1}), head H in 0..{cfg.n_heads - 1}"
    )
    if len(items) > MAX_ABLATED:
        raise ConfigError("heads", f"{len(items)} heads", f"at most {MAX_ABLATED} heads at once")
    out = set()
    for item in items:
        try:
            prefix, rest = str(item).strip().split()
            kind = LABEL_KINDS[prefix]
            layer, head = (int(x) for x in rest.split("."))
        except (ValueError, KeyError):
            raise ConfigError("heads", str(item)[:20], valid) from None
        if not (0 <= layer < depth[kind] and 0 <= head < cfg.n_heads):
            raise ConfigError("heads", str(item)[:20], valid)
        out.add((kind, layer, head))
    if not out:
        raise ConfigError("heads", "none", f"at least one head: {valid}")
    return sorted(out, key=lambda k: (KINDS.index(k[0]), k[1], k[2]))


def head_labels(cfg) -> list:
    """Every head's label: "L.H"; an encoder-decoder's decoder layers' self then cross heads, then the encoder's."""
    if not seq2seq(cfg):
        return [f"{l}.{h}" for l in range(cfg.n_layers) for h in range(cfg.n_heads)]
    depth, short = depths(cfg), {v: k for k, v in LABEL_KINDS.items()}
    return [f"{short[k]} {l}.{h}" for k in KINDS for l in range(depth[k]) for h in range(cfg.n_heads)]


def default_heads(cfg) -> list:
    """The heads ablated by default: layer 1's (the default bundle's induction heads), or layer 0's; an
    encoder-decoder's every cross-attention head (the reversal bundle's mirror heads, which back each other up)."""
    if seq2seq(cfg):
        return [f"cross {l}.{h}" for l in range(depths(cfg)["cross"]) for h in range(cfg.n_heads)]
    layer = 1 if cfg.n_layers > 1 else 0
    return [f"{layer}.{h}" for h in range(cfg.n_heads)]
