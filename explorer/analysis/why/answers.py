"""The Why tab's computations, without Gradio: inputs checked and capped, each view memoised, the CSV.

Each view runs the analyses of ``explorer.analysis`` (``lens``, ``attribution``, ``patching``) on the
weights a request resolved once (an ``explorer.analysis.source.WeightsSource``) and the text's tokens as
the maps read them (``explorer.runtime.text.model_input``: bytes, or a checkpoint's tokenizer), and
answers the analysis's ``to_json()`` with tokens labelled (bytes made visible, or the tokenizer's pieces).

Caps, checked before any model runs and refused by ``ConfigError`` naming the field: at most
``MAX_TOKENS`` tokens of text (longer texts are cut, as the maps cut them), a position inside the text,
at most ``head_labels.MAX_ABLATED`` heads ablated at once, and at most ``MAX_PATCH_FORWARDS`` forward passes for the
patching grid (one per head and per FFN, plus the clean, the corrupted, everything and nothing). Each
view holds its predicted bytes in the server's memory pool (``explorer.analysis.common.memo.memo``, with
``explorer.runtime.budget.check``'s prediction) and is memoised by weights, config and inputs.

An encoder-decoder reads the text as the other tabs do (``model_input``: the source before the separator
``=>``, the target after it) and its decoder is teacher-forced on START + the target
(``explorer.analysis.why.seq2seq_ids``), so position ``p`` predicts the target's token ``p``. Its heads are
labelled ``self L.H`` (decoder self-attention), ``cross L.H`` (cross-attention) and ``enc L.H`` (encoder);
ablation's reference is the reversal probes; patching's default corrupted text changes the source's longest
word and its mirror in the target (``patching.seq2seq_default_pair``). The head circuits stay decoder-only.
"""

from __future__ import annotations

import csv
import io

import torch

from explorer.analysis.common.memo import eval_model, memo, weights_key
from explorer.analysis.why import attribution as attribution_mod
from explorer.analysis.why import circuits as circuits_mod
from explorer.analysis.why.head_labels import depths, parse_heads
from explorer.analysis.why.lens import logit_lens
from explorer.analysis.why.patching import (
    HELDOUT_WINDOW,
    MODES,
    ablate,
    ablation_record,
    default_pair,
    head_means,
    next_token_loss,
    patch_heads,
    reference_ids,
    seq2seq_default_pair,
)
from explorer.analysis.why.seq2seq_ids import START, Seq2SeqIds, seq2seq
from explorer.runtime import budget, cost
from explorer.runtime.device import device, gpu
from explorer.runtime.limits import MAX_TEXT_BYTES
from explorer.runtime.numbers import whole_number
from explorer.runtime.text import DEFAULT_SEPARATOR, as_text, default_text, model_input
from explorer.runtime.tokens import token_label
from models import ConfigError
from models.interventions import check_model

MAX_TOKENS = MAX_TEXT_BYTES  # tokens of text a view reads (the maps' cap)
MAX_PATCH_FORWARDS = 128  # forward passes of one patching grid (a 12-layer, 16-head model needs 208)
HELDOUT_TOKENS = 4096  # tokens of the held-out passage scored by an ablation
MAX_CIRCUIT_WIDTH = 1024  # d_model of a model whose head circuits are read (d x d products per head pair)
FREQUENT = 64  # a large vocabulary's circuits: the text's most frequent tokens
VIEWS = ("lens", "attribution", "ablation", "patching", "circuits")


def check(src, view: str) -> None:
    """``ConfigError`` naming the field when ``view`` cannot run on ``src``'s model (see ``models.interventions``;
    attribution also needs the pre-LN or no-norm placement and a causal model)."""
    if src is None:
        raise ConfigError("weights", "none", "a config the controls can draw (see the status line)")
    check_model(src.config)
    if view == "attribution":
        attribution_mod.check(src.config)
    if view == "circuits":
        circuits_mod.check(src.config, tokens=() if src.config.vocab_size > circuits_mod.MAX_VOCAB else None)
        if src.config.d_model > MAX_CIRCUIT_WIDTH:
            raise ConfigError("d_model", src.config.d_model, f"at most {MAX_CIRCUIT_WIDTH} for head circuits here")


def _max_tokens(cfg) -> int:
    return min(MAX_TOKENS, int(cfg.max_len)) if getattr(cfg, "max_len", None) else MAX_TOKENS


def source_ids(src, text) -> tuple:
    """An encoder-decoder's source ids from ``text`` (the part before the separator); () for one sequence."""
    if not seq2seq(src.config):
        return ()
    text = as_text(text, default=default_text(src.config))
    return tuple(model_input(src.config, text, None, _max_tokens(src.config), tokenizer=src.tokenizer).ids("source"))


def token_ids(src, text) -> list:
    """The ids ``src``'s model reads from ``text`` ("" or None: the config's example text), at most
    ``MAX_TOKENS`` (and the model's ``max_len``); an encoder-decoder's decoder input, START + the target (the
    part after the separator; ``source_ids`` gives the source)."""
    text = as_text(text, default=default_text(src.config))
    inp = model_input(src.config, text, None, _max_tokens(src.config), tokenizer=src.tokenizer)
    ids = [START, *inp.ids("target")] if seq2seq(src.config) else list(inp.sequences[0][1])
    if len(ids) < 2:
        raise ConfigError("text", text[:40], "a text of at least 2 tokens")
    return ids


def labeller(tokenizer):
    """``id -> readable token``: the tokenizer's piece, or the byte made visible."""
    if tokenizer is None:
        return token_label
    return lambda i: str(tokenizer.pieces([int(i)])[0])


def repeat_tokens(src, text, ids: list) -> list:
    """The token positions of the second copy of the text's longest repeated word (``default_pair``), [] when
    no word repeats."""
    try:
        _, corrupted = default_pair(as_text(text, default=default_text(src.config)))
        bad = token_ids(src, corrupted)
    except ConfigError:
        return []
    if len(bad) != len(ids):
        bad = same_length(ids, bad, src.config.vocab_size)
    return [i for i, (a, b) in enumerate(zip(ids, bad)) if a != b]


def default_position(src, text, ids: list) -> int:
    """Where attribution looks by default: the first token of the second copy of the text's longest
    repeated word (its next token is what an induction head predicts), else the second-to-last token; an
    encoder-decoder: the middle of the target."""
    if seq2seq(src.config):
        return max(0, (len(ids) - 2) // 2)
    diff = repeat_tokens(src, text, ids)
    return min(diff[0], len(ids) - 2) if diff else len(ids) - 2


def position_of(value, n: int, fallback: int) -> int:
    """A position box's value: None, "" or a negative number -> ``fallback``; else an integer in 0..n-2."""
    if value in (None, ""):
        return fallback
    p = whole_number(value, "position", high=n - 2, what=f"an integer in 0..{n - 2} (-1: the default)")
    return fallback if p < 0 else p


def alternative_id(src, value):
    """The alternative token: "" or None -> none; else a text that is exactly one token."""
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise ConfigError("alternative", type(value).__name__, "a string of one token, or empty")
    ids = list(value.encode("utf-8")) if src.tokenizer is None else list(src.tokenizer.encode(value[:64]))
    if len(ids) != 1:
        what = "one byte (one ASCII character)" if src.tokenizer is None else "exactly one token of the checkpoint"
        raise ConfigError("alternative", value[:20], f"{what}, or empty for the actual next token alone")
    return int(ids[0])


def patch_forwards(cfg) -> int:
    """Forward passes of one patching grid: one per head of every kind and per FFN, plus 4."""
    depth = depths(cfg)
    return sum(depth.values()) * cfg.n_heads + depth["self"] + depth.get("encoder", 0) + 4


def check_patching(cfg) -> None:
    n = patch_forwards(cfg)
    if n > MAX_PATCH_FORWARDS:
        raise ConfigError(
            "patching",
            f"{n} forward passes ({sum(depths(cfg).values())} layers of heads x {cfg.n_heads} heads)",
            f"at most {MAX_PATCH_FORWARDS} forward passes: a model of at most "
            f"{MAX_PATCH_FORWARDS - 4} heads and FFNs in all",
        )


def heldout_tokens(tokenizer, window: int) -> torch.Tensor:
    """The held-out passage in ``(n, window)`` windows: its bytes, or a checkpoint's tokens of it."""
    from explorer.analysis.surgery.loss import heldout_text

    raw = heldout_text()
    ids = list(raw) if tokenizer is None else list(tokenizer.encode(raw.decode("utf-8", "replace")))
    ids = ids[:HELDOUT_TOKENS]
    n = max(1, len(ids) // window)
    return torch.tensor(ids[: n * window], dtype=torch.long).view(n, -1)


def _window(cfg) -> int:
    return min(HELDOUT_WINDOW, int(cfg.max_len)) if getattr(cfg, "max_len", None) else HELDOUT_WINDOW


@gpu(duration=60)
def compute_view(view: str, cfg, weights, ids: tuple, params: tuple) -> dict:
    """One view's JSON (a GPU function: picklable in and out)."""
    model = eval_model(cfg, weights)
    dev = device()
    p = dict(params)
    x = _ids(ids, p.get("source"), dev)
    label = labeller(weights.tokenizer if weights is not None else None)
    if view == "lens":
        return logit_lens(model, x).to_json(label)
    if view == "attribution":
        return attribution_mod.attribute(model, x, p["position"], alternative=p["alternative"]).to_json(label)
    if view == "ablation":
        held = (
            reference_ids(cfg).to(dev)
            if seq2seq(cfg)
            else heldout_tokens(weights.tokenizer if weights is not None else None, _window(cfg)).to(dev)
        )
        means = head_means(model, held) if p["mode"] == "mean" else None  # one pass, for both records
        out = ablate(model, x, p["heads"], p["mode"], heldout=held, means=means).to_json()
        if p["repeat"]:  # the second copy of the repeated word, after its first token: what induction predicts
            pos = torch.tensor(p["repeat"], device=dev)
            before = next_token_loss(model, x, positions=pos)
            after = next_token_loss(model, x, ablation_record(model, p["heads"], p["mode"], held, means), positions=pos)
            out["repeat"] = {"positions": list(p["repeat"]), "before": before, "after": after, "change": after - before}
        return out
    if view == "circuits":
        return _circuits(model, x, p, label)
    bad = _ids(p["corrupted"], p.get("corrupted_source"), dev)
    return patch_heads(model, x, bad).to_json()


def _ids(ids, source, dev):
    """``(1, L)`` ids, or a ``Seq2SeqIds`` when ``source`` (an encoder-decoder's) is given."""
    x = torch.tensor([list(ids)], device=dev)
    return x if not source else Seq2SeqIds(torch.tensor([list(source)], device=dev), x)


def _circuits(model, x: torch.Tensor, p: dict, label) -> dict:
    """Copying scores of every head (on the printable bytes, or the text's most frequent tokens) and one
    composition between two layers (None for a one-layer model, said in ``composition_note``)."""
    cfg = model.cfg
    tokens = None if cfg.vocab_size <= circuits_mod.MAX_VOCAB else circuits_mod.frequent_tokens(x.cpu(), FREQUENT)
    with torch.no_grad():
        out = {
            "copying": circuits_mod.head_circuits(model, tokens).to_json(label),
            "composition": None,
            "composition_note": "",
        }
        if cfg.n_layers < 2:
            out["composition_note"] = "one layer: no composition between layers"
        else:
            out["composition"] = circuits_mod.composition(model, p["earlier"], p["later"], p["kind"]).to_json()
    return out


def view(src, name: str, ids: list, **params) -> dict:
    """``name``'s JSON on ``ids``, memoised by weights, config and inputs, holding its predicted bytes."""
    cfg = src.config
    need = budget.check(cfg, "attention", len(ids), 1)
    if name == "ablation":
        w = _window(cfg)
        need = max(need, budget.check(cfg, "forward", w, HELDOUT_TOKENS // w))
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in params.items()))
    key = ("why_" + name, cfg, weights_key(src.weights), tuple(ids), frozen)

    def compute():  # a miss: its predicted compute checked first (refused by name past the budget)
        cost.charge(cfg, cost_parts(name, cfg, len(ids), params), f"The {name} view")
        return compute_view(name, cfg, src.weights, tuple(ids), frozen)

    return memo(key, compute, need=need)


def cost_parts(name: str, cfg, n: int, params: dict) -> list:
    """The forward passes of one view, as ``explorer.runtime.cost.predict`` takes them."""
    if name == "patching":
        return [(patch_forwards(cfg), n, 1)]
    if name == "ablation":
        w = _window(cfg)
        return [
            (2 + 2 * bool(params.get("repeat")), n, 1),
            (2 + (params.get("mode") == "mean"), w, HELDOUT_TOKENS // w),
        ]
    return [(3 if name == "attribution" else 1, n, 1)]


def _source(src, text) -> dict:
    """The ``source`` parameter of an encoder-decoder's view ({} for one sequence)."""
    s = source_ids(src, text)
    return {"source": s} if s else {}


def lens(src, text) -> dict:
    check(src, "lens")
    return view(src, "lens", token_ids(src, text), **_source(src, text))


def attribution(src, text, position=None, alternative=None) -> dict:
    check(src, "attribution")
    ids = token_ids(src, text)
    pos = position_of(position, len(ids), default_position(src, text, ids))
    return view(
        src, "attribution", ids, position=pos, alternative=alternative_id(src, alternative), **_source(src, text)
    )


def ablation(src, text, heads, mode="zero") -> dict:
    check(src, "ablation")
    if mode not in MODES:
        raise ConfigError("mode", str(mode)[:20], f"one of {list(MODES)}")
    pairs = parse_heads(heads, src.config)
    ids = token_ids(src, text)
    repeat = () if seq2seq(src.config) else tuple(d - 1 for d in repeat_tokens(src, text, ids)[1:])  # positions
    # predicting the copy's later tokens
    return view(src, "ablation", ids, heads=tuple(pairs), mode=mode, repeat=repeat, **_source(src, text))


def same_length(ids: list, bad: list, vocab: int) -> list:
    """A tokenizer may split the changed word into another number of tokens: the clean ids with the tokens
    that differ (between the common prefix and suffix of ``ids`` and ``bad``) each replaced by the next id."""
    a = 0
    while a < min(len(ids), len(bad)) and ids[a] == bad[a]:
        a += 1
    b = 0
    while b < min(len(ids), len(bad)) - a and ids[-1 - b] == bad[-1 - b]:
        b += 1
    return ids[:a] + [(t + 1) % vocab for t in ids[a : len(ids) - b]] + ids[len(ids) - b :]


def patching(src, text, corrupted=None) -> dict:
    """Patching of ``text`` (clean) and ``corrupted`` ("" or None: ``patching.default_pair``'s; through a
    tokenizer that splits the changed word differently, its changed tokens each moved to the next id, so
    the two runs have one length: ``corrupted_text`` says what was run)."""
    check(src, "patching")
    check_patching(src.config)
    text = as_text(text, default=default_text(src.config))
    if seq2seq(src.config):
        return _seq2seq_patching(src, text, corrupted)
    bad = default_pair(text)[1] if corrupted in (None, "") else as_text(corrupted)
    ids, bad_ids = token_ids(src, text), token_ids(src, bad)
    if len(bad_ids) != len(ids) and corrupted in (None, "") and src.tokenizer is not None:
        bad_ids = same_length(ids, bad_ids, src.config.vocab_size)
        bad = src.tokenizer.decode(bad_ids)
    if len(bad_ids) != len(ids):
        raise _length_differs(bad, len(bad_ids), len(ids))
    return {**view(src, "patching", ids, corrupted=tuple(bad_ids)), "corrupted_text": bad}


def _length_differs(bad: str, n: int, clean_n: int, side: str = "") -> ConfigError:
    """The refusal of a corrupted text whose length in tokens is not the clean text's: what it is, what is accepted."""
    head = bad if len(bad) <= 40 else bad[:40] + "…"
    return ConfigError(
        "corrupted",
        f"{head} ({n} {side}tokens)",
        f"a text of the same number of {side}tokens as the clean text ({clean_n}): "
        "patching swaps activations position by position",
    )


def _seq2seq_patching(src, text, corrupted) -> dict:
    """An encoder-decoder's patching: clean and corrupted "source=>target" texts of one source length and one
    target length (default: ``seq2seq_default_pair`` of the clean text's two sides)."""
    if corrupted in (None, ""):
        inp = model_input(src.config, text, None, _max_tokens(src.config))
        source, target = (bytes(inp.ids(n)).decode("utf-8", "replace") for n in ("source", "target"))
        bad = DEFAULT_SEPARATOR.join(seq2seq_default_pair(source, target))
    else:
        bad = as_text(corrupted)
    ids, bad_ids = token_ids(src, text), token_ids(src, bad)
    s, bad_s = source_ids(src, text), source_ids(src, bad)
    for side, a, b in (("source", s, bad_s), ("target", ids, bad_ids)):
        if len(a) != len(b):
            raise _length_differs(bad, len(b), len(a), f"{side} ")
    return {
        **view(src, "patching", ids, corrupted=tuple(bad_ids), source=s, corrupted_source=bad_s),
        "corrupted_text": bad,
    }


def _layer(value, name: str, cfg) -> int:
    return whole_number(value, name, 0, cfg.n_layers - 1, what=f"a layer in 0..{cfg.n_layers - 1}")


def circuits(src, text, kind="K", earlier=0, later=1) -> dict:
    """Head circuits: each head's OV copying scores and ``kind``-composition of layer ``earlier``'s heads
    with layer ``later``'s (``explorer.analysis.why.circuits``); ``text`` picks a large vocabulary's tokens."""
    check(src, "circuits")
    cfg = src.config
    if kind not in circuits_mod.KINDS:
        raise ConfigError("kind", str(kind)[:20], f"one of {list(circuits_mod.KINDS)}")
    if cfg.n_layers > 1:
        earlier, later = _layer(earlier, "earlier", cfg), _layer(later, "later", cfg)
        if earlier >= later:
            raise ConfigError("later", later, f"a layer after earlier={earlier}, at most {cfg.n_layers - 1}")
    ids = token_ids(src, text) if cfg.vocab_size > circuits_mod.MAX_VOCAB else [0, 0]
    return view(src, "circuits", ids, kind=kind, earlier=earlier, later=later)


def csv_text(lens_json=None, attr_json=None, patch_json=None, ablation_json=None, circuits_json=None) -> str:
    """The views' numbers as one CSV: ``view,row,column,label,value``."""
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["view", "row", "column", "label", "value"])
    if lens_json:
        for r, row in enumerate(lens_json["rows"]):
            for i, p in enumerate(lens_json["positions"]):
                w.writerow(["lens_p_target", row, p, lens_json["targets"][i], lens_json["target_prob"][r][i]])
                w.writerow(["lens_rank", row, p, lens_json["targets"][i], lens_json["target_rank"][r][i]])
                w.writerow(["lens_top", row, p, lens_json["top_tokens"][r][p][0], lens_json["top_probs"][r][p][0]])
            w.writerow(["lens_loss", row, "", lens_json["unit"], lens_json["loss_per_layer"][r]])
    for name, grid in (("attribution", attr_json), ("patching", patch_json)):
        if grid:
            seq = grid.get("cross") is not None  # an encoder-decoder: decoder self, cross, and the encoder's heads
            for layer, row in enumerate(grid["heads"]):
                where = f"decoder layer {layer}" if seq else f"layer {layer}"
                for head, v in enumerate(row):
                    w.writerow(
                        [name, where, f"self head {head}" if seq else f"head {head}", grid.get("measure", ""), v]
                    )
                for head, v in enumerate(grid["cross"][layer] if seq else []):
                    w.writerow([name, where, f"cross head {head}", grid.get("measure", ""), v])
                w.writerow([name, where, "FFN", grid.get("measure", ""), grid["ffn"][layer]])
            for layer, row in enumerate(grid.get("encoder") or []):
                for head, v in enumerate(row):
                    w.writerow([name, f"encoder layer {layer}", f"head {head}", grid.get("measure", ""), v])
                w.writerow([name, f"encoder layer {layer}", "FFN", grid.get("measure", ""), grid["encoder_ffn"][layer]])
    if circuits_json:
        for layer, row in enumerate(circuits_json["copying"]["copying_eigen"]):
            for head, v in enumerate(row):
                w.writerow(["copying_eigen", f"layer {layer}", f"head {head}", "", v])
        comp = circuits_json["composition"]
        for a, row in enumerate(comp["scores"] if comp else []):
            for b, v in enumerate(row):
                w.writerow(
                    [
                        comp["kind"] + "_composition",
                        f"{comp['earlier_layer']}.{a}",
                        f"{comp['later_layer']}.{b}",
                        f"random baseline {comp['random_baseline']:.4f}",
                        v,
                    ]
                )
    if ablation_json:
        for where in ("text", "heldout") + (("repeat",) if ablation_json.get("repeat") else ()):
            for k in ("before", "after", "change"):
                w.writerow(
                    ["ablation_" + ablation_json["mode"], where, k, ablation_json["unit"], ablation_json[where][k]]
                )
    return buf.getvalue()
