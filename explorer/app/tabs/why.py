"""The Why tab and the ``/logit_lens``, ``/attribution``, ``/ablation``, ``/patching``, ``/circuits`` endpoints:
what each head does to the prediction, on the weights on screen and the text in the box.

The tab draws five views (``explorer.analysis.why.answers``, each an analysis of ``explorer.analysis``): the
logit lens (layers x positions), direct logit attribution at a chosen position (layers x heads + FFN, the
attention grid's layout; an alternative token optional), ablation of the heads ticked (zero or mean; the
loss change on the text and the held-out passage) and activation patching between the text (clean) and a
corrupted one of the same length (default: the second copy of its longest repeated word changed) as a
grid, and the head circuits (each head's OV copying score, the K-, Q- or V-composition of layer 0's heads
with layer 1's). A view a model cannot have (attribution of a post-LN model, the circuits of an
encoder-decoder, any view of a non-standard layer) is replaced by a warning naming the field and its valid
values; the others are drawn. An encoder-decoder reads the text as the other tabs do (source ``=>`` target)
and is read on its decoder, teacher-forced on START + the target; its grids are decoder layers x (self-attention
heads, cross-attention heads, FFN), patching adds the encoder's layers as rows (``answers``).
Opening the tab draws it once per session; "Explain" redraws. The weights are the request's
``WeightsSource`` (resolved once by ``explorer.app.controls.weights.with_weights``). The share link adds
``why_pos``, ``why_alt``, ``why_bad`` and ``tab=why`` to the page's link; the CSV holds every grid's numbers.
"""

import hashlib
import json
from urllib.parse import urlencode

import gradio as gr

from explorer.analysis.why import answers as wv
from explorer.analysis.why import head_labels as wh
from explorer.analysis.why.cards import cards_table_md, load_cards
from explorer.analysis.why.grounded_view import grounded_json
from explorer.app.controls import weights as weights_switch
from explorer.app.controls.fields import CONTROL_FIELDS
from explorer.app.controls.share import MAX_LINK_TEXT_BYTES
from explorer.app.controls.state import after_the_grid
from explorer.app.server.api_types import (
    AblationResult,
    AttributionResult,
    CircuitsResult,
    LogitLensResult,
    PatchingResult,
)
from explorer.app.server.calls import call, request_source
from explorer.app.server.gradio_compat import cache_file
from explorer.app.server.messages import problem, shown_problem
from explorer.app.tabs.contract import Page, Step, Tab
from explorer.app.tabs.parts.tab_tail import build_tail, wire_link
from explorer.figures.base import message_figure
from explorer.figures.cards import cards_figure, roles_table_md
from explorer.figures.interpretability import (
    attribution_figure,
    composition_figure,
    copying_figure,
    lens_figure,
    patching_figure,
)
from explorer.runtime.configs import app_config
from explorer.runtime.untrusted import shown

INPUTS = ("text", "why_pos", "why_alt", "why_heads", "why_mode", "why_bad", "why_kind")
OUTPUTS = (
    "why_md",
    "why_roles",
    "why_lens",
    "why_attr",
    "why_abl_md",
    "why_patch",
    "why_copy",
    "why_comp",
    "why_csv",
    "why_heads",
    "why_qs",
    "why_drawn",
)
ROLES_INTRO = (
    "**Head roles by fixed probes and their cause** (independent of your text): each head's role is read on "
    "fixed probe texts (random strings repeated at several distances, held-out prose, periodic text) and "
    "confirmed by mean-ablating the head: the number in brackets is the loss change, in nats per token, "
    'on the probe the role predicts; "?": below the threshold, so the cause does not confirm it. The '
    "Attention tab's labels are read on your text."
)
MAX_ALT_CHARS = 16
INTRO = (
    "**Why**: what each head does to the prediction. The logit lens reads the prediction after every layer; "
    "attribution splits one logit among the heads (the final norm's scale frozen at its value on this forward "
    "pass); ablation removes the ticked heads; patching swaps one head's output from the text into a "
    "corrupted copy and measures how much of the right answer comes back; the circuits read what each head "
    "copies and which heads compose from the weights alone. One figure as PNG: the camera button in its "
    "toolbar."
)


def build_why_tab() -> dict:
    """The tab's components by name (inside the caller's ``gr.Tabs``)."""
    cfg = app_config("")
    out = {}
    with gr.Tab("Why", id="why") as out["why_tab"]:
        out["why_md"] = gr.Markdown(INTRO, elem_id="why-reading")
        out["why_roles"] = gr.Markdown("", elem_id="why-roles")
        out["why_lens"] = gr.Plot(None, label="Logit lens", elem_id="why-lens")
        with gr.Row():
            out["why_pos"] = gr.Number(
                -1,
                precision=0,
                elem_id="why-pos",
                label="Attribution at position (-1: inside the second copy of the repeated word)",
            )
            out["why_alt"] = gr.Textbox(
                "",
                max_length=MAX_ALT_CHARS,
                elem_id="why-alt",
                label="Alternative token (empty: the actual next token alone)",
            )
            out["why_run"] = gr.Button("Explain", variant="primary", elem_id="why-run")
        out["why_attr"] = gr.Plot(None, label="Direct logit attribution", elem_id="why-attr")
        with gr.Row():
            out["why_heads"] = gr.CheckboxGroup(
                wh.head_labels(cfg),
                value=wh.default_heads(cfg),
                elem_id="why-heads",
                label=f"Heads to ablate (layer.head; at most {wh.MAX_ABLATED})",
            )
            out["why_mode"] = gr.Radio(
                [("zero", "zero"), ("mean over the held-out passage", "mean")],
                value="zero",
                label="Ablation",
                elem_id="why-mode",
            )
            out["why_ablate"] = gr.Button("Ablate", elem_id="why-ablate")
        out["why_abl_md"] = gr.Markdown("", elem_id="why-ablation")
        out["why_bad"] = gr.Textbox(
            "",
            lines=2,
            max_length=MAX_LINK_TEXT_BYTES,
            elem_id="why-bad",
            label="Corrupted text for patching (same length; empty: the second copy of the repeated word changed)",
        )
        out["why_patch"] = gr.Plot(None, label="Activation patching", elem_id="why-patch")
        out["why_kind"] = gr.Radio(
            [("K (keys read what it writes: induction)", "K"), ("Q", "Q"), ("V", "V")],
            value="K",
            label="Composition of layer 0's heads with layer 1's",
            elem_id="why-kind",
        )
        with gr.Row():
            out["why_copy"] = gr.Plot(None, label="OV copying scores", elem_id="why-copy")
            out["why_comp"] = gr.Plot(None, label="Composition", elem_id="why-comp")
        out.update(build_tail("why", "Grids (CSV)"))
        with gr.Accordion(
            "Circuit cards: the same circuit across the shipped models", open=False, elem_id="why-cards-box"
        ):
            fig, table = cards_section()
            out["why_cards"] = gr.Plot(fig, label="Circuit cards", elem_id="why-cards")
            out["why_cards_md"] = gr.Markdown(table, elem_id="why-cards-table")
    return out


def cards_section() -> tuple:
    """``(figure, Markdown)`` of the circuit cards stored beside the shipped models (``explorer.analysis.why.cards``):
    one per model, read at start-up; a card that fails its checks is said instead of drawn."""
    try:
        cards = load_cards()
    except Exception as exc:  # an edited card or one of other weights: said, the page still builds
        return message_figure(problem(exc), "Circuit cards"), f"⚠️ {shown_problem(exc)}"
    return cards_figure(cards), cards_table_md(cards)


SEQ2SEQ_ROLES_INTRO = (
    "**Cross-attention heads by fixed reversal probes and their cause** (independent of your "
    'text): a head is "mirror" when it attends, from target position t, to source position '
    "Ls-1-t (the number is that mean attention, on random strings of the trained length and "
    "their reversals); in brackets the loss change, in nats per token, when it is mean-ablated "
    'alone. "?": below the threshold alone and together with the other mirror heads.'
)


def roles_reading(weights) -> str:
    """The grounded roles of the weights on screen (the stored card of a shipped model as trained, else
    computed on the probes; an encoder-decoder: its reversal card's cross-attention heads), or why there are
    none."""
    g = grounded_json(weights.config, weights.weights)
    where = "from " + g["source"]
    intro = SEQ2SEQ_ROLES_INTRO if g.get("stack") else ROLES_INTRO
    together = g.get("groups", {}).get("mirror")
    extra = (
        f" Every mirror head mean-ablated together: {together['effect']:+.2f} nats per token."
        if g.get("stack") and together
        else ""
    )
    return f"{intro} _Source: {shown(where)}._{extra}\n\n{roles_table_md(g)}"


def _warned(view: str, exc: Exception) -> str:
    return f"⚠️ **{view}:** {shown_problem(exc)}"


def ablation_reading(a: dict) -> str:
    heads = ", ".join(f"{h[0]} {h[1]}.{h[2]}" if len(h) == 3 else f"{h[0]}.{h[1]}" for h in a["heads"])
    t, h, r = a["text"], a["heldout"], a.get("repeat")
    copy = (
        (
            f" On the second copy of the repeated word (its tokens after the first, which induction predicts): "
            f"**{r['before']:.3f} → {r['after']:.3f}** ({r['change']:+.3f})."
        )
        if r
        else ""
    )
    return (
        f"**{a['mode'].capitalize()} ablation of {heads}**: loss on the text {t['before']:.3f} → "
        f"{t['after']:.3f} ({t['change']:+.3f}) {a['unit']}; on {a.get('heldout_name', 'the held-out passage')} "
        f"{h['before']:.3f} → "
        f"{h['after']:.3f} ({h['change']:+.3f}).{copy}"
    )


def draw(
    values,
    weights=None,
    text="",
    why_pos=-1,
    why_alt="",
    why_heads=None,
    why_mode="zero",
    why_bad="",
    why_kind="K",
    **_kw,
) -> dict:
    """-> every output of the tab (``weights``: the request's WeightsSource; each view that fails is a warning).
    ``why_drawn`` holds the key of the scene on screen (``scene_key``); ``first_only`` (the tab opened): a skip
    when the tab already shows the controls' scene, so opening it draws only what changed while it was closed."""
    key = scene_key(weights, text)
    if _kw.get("first_only") and _kw.get("why_drawn") == key:
        return {k: gr.skip() for k in OUTPUTS}
    notes, got = [], {}
    if weights is not None and why_heads:  # labels of another model's heads (a switch of architecture): the defaults
        labels = wh.head_labels(weights.config)
        why_heads = [h for h in why_heads if h in labels] or wh.default_heads(weights.config)
    runs = (
        ("roles", "Head roles", lambda: roles_reading(weights)),
        ("lens", "Logit lens", lambda: wv.lens(weights, text)),
        ("attr", "Attribution", lambda: wv.attribution(weights, text, why_pos, why_alt)),
        ("abl", "Ablation", lambda: wv.ablation(weights, text, why_heads or [], why_mode or "zero")),
        ("patch", "Patching", lambda: wv.patching(weights, text, why_bad)),
        ("circ", "Circuits", lambda: wv.circuits(weights, text, why_kind or "K")),
    )
    for key, name, fn in runs:
        try:
            got[key] = fn()
        except Exception as exc:  # a refused model or input (ConfigError), the budget, anything: said, not raised
            notes.append(_warned(name, exc))
    heads = gr.skip()
    if weights is not None:
        labels = wh.head_labels(weights.config)
        kept = [h for h in (why_heads or []) if h in labels]
        heads = gr.update(choices=labels, value=kept if why_heads else wh.default_heads(weights.config))
    csv = wv.csv_text(got.get("lens"), got.get("attr"), got.get("patch"), got.get("abl"), got.get("circ"))
    circ = got.get("circ") or {}
    if circ.get("composition_note"):
        notes.append(f"_Circuits: {circ['composition_note']}._")
    pos = got["attr"]["position"] if "attr" in got else why_pos
    qs = urlencode(
        {
            "why_pos": pos,
            **({"why_alt": why_alt} if why_alt else {}),
            **({"why_bad": why_bad} if why_bad else {}),
            "tab": "why",
        }
    )
    return {
        "why_md": "\n\n".join([INTRO, *notes]),
        "why_roles": got.get("roles", ""),
        "why_lens": lens_figure(got["lens"], got["attr"]["position"] if "attr" in got else None)
        if "lens" in got
        else None,
        "why_attr": attribution_figure(got["attr"]) if "attr" in got else None,
        "why_abl_md": ablation_reading(got["abl"]) if "abl" in got else "",
        "why_patch": patching_figure(got["patch"]) if "patch" in got else None,
        "why_copy": copying_figure(circ["copying"]) if circ else None,
        "why_comp": composition_figure(circ["composition"]) if circ.get("composition") else None,
        "why_csv": cache_file(csv.encode(), "why_grids.csv")["path"],
        "why_heads": heads,
        "why_qs": qs,
        "why_drawn": key,
    }


def scene_key(weights, text: str) -> str:
    """What the tab's views depend on beyond its own boxes, as a short digest: the drawn config, the digest of
    its weights (None: initial) and the text. The tab's own boxes are drawn by their own events."""
    cfg = getattr(weights, "config", None)
    record = getattr(weights, "weights", None)
    raw = json.dumps([cfg.to_json() if cfg is not None else None, getattr(record, "digest", None), text])
    return hashlib.sha256(raw.encode()).hexdigest()[:24]


def refresh_why(values, weights=None, state=None, open_tab=None, why_drawn=None, **named) -> dict:
    """The chain's step: while the tab is open a change of the controls redraws its views (the tab never shows
    another configuration's reading as current); while it is closed nothing runs, and opening it draws
    (``why_open``)."""
    if open_tab != "why":
        return {k: gr.skip() for k in OUTPUTS}

    def run():
        return draw(values, weights=weights, first_only=True, why_drawn=why_drawn, **named)

    return after_the_grid(state, OUTPUTS, lambda: call(run))


def from_link(request: gr.Request) -> dict:
    """A link's ``why_pos`` / ``why_alt`` / ``why_bad`` -> the boxes (anything malformed or too long is ignored)."""
    params = dict(request.query_params) if request is not None else {}
    out = {"why_pos": gr.skip(), "why_alt": gr.skip(), "why_bad": gr.skip()}
    pos = params.get("why_pos", "")
    if pos.lstrip("-").isdigit() and len(pos) <= 6:
        out["why_pos"] = int(pos)
    if 0 < len(params.get("why_alt", "")) <= MAX_ALT_CHARS:
        out["why_alt"] = params["why_alt"]
    if 0 < len(params.get("why_bad", "").encode("utf-8")) <= MAX_LINK_TEXT_BYTES:
        out["why_bad"] = params["why_bad"]
    return out


def wire(page: Page) -> None:
    """The tab's events and its endpoints."""
    demo, ui = page.demo, page.ui
    names = (*CONTROL_FIELDS, "trained", "weights", *INPUTS)

    def drawn(data, first_only: bool):
        values, named = ui.split(data)
        named["first_only"] = first_only  # ``draw`` skips when the tab shows the controls' scene already
        trained, choice = named.pop("trained", None), named.pop("weights", None)
        with_w = weights_switch.with_weights(draw)
        return ui.back(call(lambda: with_w(values, trained=trained, weights=choice, **named)))

    inputs, outputs = ui.inputs(*names), ui.outputs(*OUTPUTS)
    progress = dict(show_progress="minimal", show_progress_on=ui.outputs("why_lens"))  # one loading target
    gr.on(
        [ui["why_run"].click, ui["why_ablate"].click, ui["why_kind"].input],
        lambda data: drawn(data, False),
        inputs,
        outputs,
        api_name="why_draw",
        api_visibility="undocumented",
        concurrency_id="compute",
        **progress,
    )
    ui["why_tab"].select(
        lambda data: drawn(data, True),
        ui.inputs(*names, "why_drawn"),
        outputs,
        api_name="why_open",
        api_visibility="undocumented",
        concurrency_id="compute",
        **progress,
    )
    wire_link(ui, "why")

    def link_fn(request: gr.Request):
        return ui.back(from_link(request))

    demo.load(link_fn, None, ui.outputs("why_pos", "why_alt", "why_bad"), queue=False, api_visibility="private")
    for fn, name in (
        (api_logit_lens, "logit_lens"),
        (api_attribution, "attribution"),
        (api_ablation, "ablation"),
        (api_patching, "patching"),
        (api_circuits, "circuits"),
    ):
        gr.api(fn, api_name=name, concurrency_id="compute")


def _answer(config_json, weights, fn) -> dict:
    def run():
        src = request_source(config_json, weights)
        return {**fn(src), "weights": src.used()}

    return call(run)


def api_logit_lens(config_json: str = "", text: str = "", weights: str = "bundled") -> LogitLensResult:
    """Logit lens of the config on ``text`` ("" : the example text; at most 256 tokens read, as the maps):
    per layer (``rows``: the embedding, then each block) and position, the top tokens and probabilities, the
    target's probability and rank (0: the top), and the loss per layer in nats per token. ``weights`` as
    ``/analyze`` takes it. An encoder-decoder's text is "source=>target": the rows are its decoder's, teacher-forced
    on START + the target. Refused (naming the field): a non-standard layer, a memory."""
    return _answer(config_json, weights, lambda src: wv.lens(src, text))


def api_attribution(
    config_json: str = "", text: str = "", position: int = -1, alternative: str = "", weights: str = "bundled"
) -> AttributionResult:
    """Direct logit attribution at ``position`` (0..L-2; -1: the first token of the second copy of the text's
    longest repeated word) to the logit of the actual next token, minus ``alternative``'s (one token, "" for
    none): ``heads[layer][head]``, ``ffn[layer]``, the embedding's, position's and biases' terms, their
    ``total`` and the model's ``logit``. The final norm's scale is frozen at its forward value. Refused
    (naming ``norm_placement``) for post-LN, sandwich and ReZero."""
    return _answer(config_json, weights, lambda src: wv.attribution(src, text, position, alternative))


def api_ablation(
    config_json: str = "", text: str = "", heads: str = "", mode: str = "zero", weights: str = "bundled"
) -> AblationResult:
    """The loss (nats per token) on ``text``, on the held-out passage and (``repeat``, when a word of the text
    repeats) on the second copy's tokens after its first, before and after ablating ``heads``
    ("layer.head" labels separated by commas, at most 32; "": every head of layer 1, or of layer 0 in a
    one-layer model) by ``mode`` (``zero`` or ``mean``: the head's mean
    output over the held-out passage)."""
    return _answer(
        config_json,
        weights,
        lambda src: wv.ablation(src, text, wh.default_heads(src.config) if heads in (None, "") else heads, mode),
    )


def api_patching(
    config_json: str = "", text: str = "", corrupted: str = "", weights: str = "bundled"
) -> PatchingResult:
    """Activation patching from ``text`` (clean) into ``corrupted`` (same number of tokens; "": the clean text
    with the second copy of its longest repeated word changed): ``heads[layer][head]`` and ``ffn[layer]``,
    the fraction of the clean-vs-corrupted logit difference restored, with the checks (everything patched: 1,
    nothing: 0). At most 128 forward passes (heads + FFNs + 4), else refused naming ``patching``."""
    return _answer(config_json, weights, lambda src: wv.patching(src, text, corrupted))


def api_circuits(
    config_json: str = "", text: str = "", kind: str = "K", earlier: int = 0, later: int = 1, weights: str = "bundled"
) -> CircuitsResult:
    """Head circuits from the weights alone: ``copying`` (each head's OV copying scores, ``copying_eigen`` and
    ``copying_diagonal``, on the printable bytes and newline, or for a larger vocabulary the 64 most frequent
    tokens of ``text``) and ``composition``: ``kind`` (K, Q or V) composition of layer ``earlier``'s heads with
    layer ``later``'s, with the random baseline (None for a one-layer model). Refused (naming the field): an
    encoder-decoder (``architecture``: its cross-attention heads read another stream), a non-standard layer,
    ``d_model`` over 1024."""
    return _answer(config_json, weights, lambda src: wv.circuits(src, text, kind, earlier, later))


def export(scene) -> list:
    """The circuit cards (static: stored beside the models), when the visitor opened the tab in this session."""
    if not scene.extra.get("why_drawn"):
        return []
    fig, _table = cards_section()
    return [("Circuit cards across the shipped models", [("circuit-cards", fig)])]


TAB = Tab(
    "why",
    lambda landing: build_why_tab(),
    steps=(Step("analysis", refresh_why, (*INPUTS, "state", "open_tab", "why_drawn"), OUTPUTS),),
    wire=wire,
    export=export,
    export_inputs=("why_drawn",),
    link=("why_pos", "why_alt", "why_bad"),
)
