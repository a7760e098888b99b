"""The documented endpoints' answers have exactly the shape their return annotations declare
(``explorer.app.server.api_types``, what ``gradio_client``'s ``view_api()`` shows): each endpoint called in-process on
tiny configs (a decoder and an encoder-decoder), every variant view on a config that has it, every answer
checked recursively (``api_shapes.Shapes``: no undeclared key, every required key, every value of its type), and
every declared key seen in some answer (a checkpoint's keys: ``tests/explorer/checkpoints/test_api_types_ckpt.py``).
The Why tab's endpoints (``/logit_lens``, ``/attribution``, ``/ablation``, ``/patching``, ``/circuits``) and
``/long_context`` are checked the same way, their handlers called directly. The annotations themselves are objects
gradio can read, not strings, and ``gradio_client`` renders each of them into a schema."""

import asyncio
import inspect
import json
import sys
import zipfile

from api_shapes import Shapes
from gradio_client.utils import json_schema_to_python_type, python_type_to_json_schema

from explorer.analysis import attention_maps
from explorer.analysis.views import VIEWS
from explorer.app.api import endpoints as api
from explorer.app.server.api_types import (
    AblationResult,
    AnalyzeResult,
    AttributionResult,
    CircuitsResult,
    CompareResult,
    ExportFile,
    GradientsResult,
    LogitLensResult,
    LongContextResult,
    LossSummary,
    PatchingResult,
    Perplexity,
    SweepRecord,
    ViewsSummary,
)
from explorer.app.tabs import long_context, why
from models import ModelConfig

SMALL = dict(n_layers=2, d_model=32, n_heads=2)
DECODER = json.dumps(SMALL)
ENCDEC = json.dumps({**SMALL, "architecture": "encoder_decoder"})
TEXT = "the cat sat on the mat"
PAIR = "the cat => le chat"


def test_the_endpoints_are_annotated_with_objects_gradio_reads():
    expected = {
        api.api_analyze: AnalyzeResult,
        api.api_gradients: GradientsResult,
        api.api_benchmark: list[SweepRecord],
        api.api_export: ExportFile,
        api.api_compare: CompareResult,
        why.api_logit_lens: LogitLensResult,
        why.api_attribution: AttributionResult,
        why.api_ablation: AblationResult,
        why.api_patching: PatchingResult,
        why.api_circuits: CircuitsResult,
        long_context.api_long_context: LongContextResult,
    }
    for fn, result in expected.items():
        sig = inspect.signature(fn)  # what gradio.utils.get_return_types reads: no string annotations
        assert sig.return_annotation == result, fn.__name__
        assert all(not isinstance(p.annotation, str) for p in sig.parameters.values()), fn.__name__
        shown = json_schema_to_python_type(python_type_to_json_schema(result))  # what view_api() prints
        expanded = shown == "filepath" if result is ExportFile else shown.startswith(("dict(", "list[dict("))
        assert expanded and "Any" not in shown, (fn.__name__, shown)


def test_analyze_and_gradients_answers_match_their_types():
    shapes = Shapes()
    for config, text, weights in (
        (DECODER, TEXT, "initial"),
        (DECODER, TEXT, "bundled"),  # no bundle serves it: the initial weights, with the choice requested
        ("", "", "bundled"),  # the default model's bundle: its step
        (ENCDEC, PAIR, "initial"),
    ):
        answer = api.api_analyze(config, text, weights=weights)
        shapes.check(answer, AnalyzeResult, f"/analyze {config} {weights}")
        shapes.check(api.api_gradients(config, weights=weights, text=text), GradientsResult, f"/gradients {config}")
    # the views are checked below; a checkpoint's keys with the checkpoint tests
    skip = (ViewsSummary, Perplexity, LossSummary)
    assert shapes.unseen(AnalyzeResult, GradientsResult, skip=skip) == {
        "AnalyzeWeights": {"checkpoint", "perplexity", "loss"},
        "WeightsUsed": {"checkpoint"},
    }


# a tiny config with each view (the configs of tests/explorer/analysis/views)
TINY = dict(n_layers=2, d_model=16, n_heads=2)
ROPE = dict(TINY, position="rope")
STORE = dict(segment_len=16, knn_k=4, knn_size=64)
VIEW_CONFIGS = {
    "approximation": dict(attention="linear", **TINY),
    "groups": dict(attention="lsh", ffn="switch", **TINY),
    "span": dict(attention="adaptive_span", max_span=8, span_ramp=4, **TINY),
    "experts": dict(ffn="moe", n_experts=3, top_k=2, capacity_factor=1.0, **TINY),
    "memory": dict(memory="xl", segment_len=8, mem_len=6, **TINY),
    "exit": dict(layer="early_exit", exit_threshold=0.004, **TINY),
    "act": dict(layer="universal", act=True, n_layers=3, d_model=16, n_heads=2),
    "sinkhorn": dict(attention="sinkhorn", block_size=4, causal=False, **ROPE),
    "probsparse": dict(attention="probsparse", causal=False, **ROPE),
    "talking_heads": dict(attention="talking_heads", causal=True, **TINY),
    "residual": dict(attention="predictive_attention", causal=True, **TINY),
    "pkm": dict(ffn="pkm", pkm_subkeys=8, pkm_topk=3, pkm_heads=2, **TINY),
    "funnel": dict(layer="funnel", n_layers=6, funnel_blocks=3, d_model=16, n_heads=2),
    "induced": dict(attention="luna", causal=False, n_inducing=3, **ROPE),
    "lite": dict(attention="lite", conv_kernel=3, **ROPE),
    "retrieval": dict(memory="knn_lm", knn_lambda=0.3, **STORE, **ROPE),
    "feedback": dict(layer="feedback", max_len=64, **ROPE),
    "sandwich": dict(layer="sandwich", sandwich_coeff=1, **ROPE),
}


def test_every_view_is_declared_and_its_summary_matches_its_type():
    assert set(VIEWS) == set(ViewsSummary.__optional_keys__) == set(VIEW_CONFIGS)
    shapes = Shapes()
    for name, fields in VIEW_CONFIGS.items():
        views = attention_maps(ModelConfig(**fields), "the cat sat; the cat sat; the cat sat on the mat").summary()
        assert name in views["views"], name
        shapes.check(views["views"], ViewsSummary, f"views of {name}")
    assert shapes.unseen(ViewsSummary) == {}


def test_benchmark_records_match_their_type():
    shapes = Shapes()
    for config, kw in ((DECODER, {}), (ENCDEC, {"seq2seq_axis": "source"})):
        records = asyncio.run(api.api_benchmark(config, "16,32", "forward", **kw))
        assert [r["status"] for r in records] == ["ok", "ok"]
        shapes.check(records, list[SweepRecord], f"/benchmark {config}")
    # n_heads / batch are absent only from a sweep cancelled before it started; compile_s only after a compile
    assert shapes.unseen(SweepRecord) in ({"SweepRecord": {"compile_s"}}, {})


def test_export_answer_is_a_file_record(monkeypatch):
    monkeypatch.setitem(sys.modules, "kaleido", None)  # no PNGs: the zip's page is enough here
    answer = asyncio.run(api.api_export(DECODER, TEXT, weights="initial"))
    shapes = Shapes()
    shapes.check(answer, ExportFile, "/export")
    assert shapes.unseen(ExportFile) == {}
    with zipfile.ZipFile(answer["path"]) as zf:
        assert "config.json" in zf.namelist()


def test_compare_answer_matches_its_type():
    shapes = Shapes()
    for a, b, text in ((DECODER, json.dumps({**SMALL, "norm_placement": "post"}), TEXT), (ENCDEC, ENCDEC, PAIR)):
        shapes.check(api.api_compare(a, b, text, weights="initial"), CompareResult, f"/compare_ab {a}")
    unseen = shapes.unseen(CompareResult, skip=(ViewsSummary,))
    assert unseen == {"WeightsUsed": {"checkpoint", "step", "requested", "surgery"}}, unseen


SEQ2SEQ = "abcdef=>fedcba"  # a reversal: the default corrupted pair changes the source and its mirror
ONE_LAYER = json.dumps({**SMALL, "n_layers": 1})


def test_why_answers_match_their_types():
    shapes = Shapes()
    for config, text in ((DECODER, TEXT), (ENCDEC, SEQ2SEQ)):
        lens = why.api_logit_lens(config, text, weights="initial")
        shapes.check(lens, LogitLensResult, f"/logit_lens {config}")
        for alternative in ("", "a"):
            attr = why.api_attribution(config, text, -1, alternative, weights="initial")
            shapes.check(attr, AttributionResult, f"/attribution {config} {alternative!r}")
        for mode in ("zero", "mean"):
            abl = why.api_ablation(config, text, "", mode, weights="initial")
            shapes.check(abl, AblationResult, f"/ablation {config} {mode}")
        shapes.check(why.api_patching(config, text, "", weights="initial"), PatchingResult, f"/patching {config}")
    assert "repeat" in why.api_ablation(DECODER, TEXT, "", weights="initial")  # "the" repeats
    for config in (DECODER, ONE_LAYER):  # a one-layer model: no composition
        for kind in ("K", "V"):
            circ = why.api_circuits(config, TEXT, kind, 0, 1, weights="initial")
            shapes.check(circ, CircuitsResult, f"/circuits {config} {kind}")
    assert circ["composition"] is None and circ["composition_note"]
    roots = (LogitLensResult, AttributionResult, AblationResult, PatchingResult, CircuitsResult)
    unseen = shapes.unseen(*roots)
    assert unseen == {"WeightsUsed": {"checkpoint", "step", "requested", "surgery"}}, unseen


def test_long_context_answer_matches_its_type():
    shapes = Shapes()
    for source, change in (("heldout", "window_sinks"), ("pasted", "window")):
        answer = asyncio.run(
            long_context.api_long_context(
                DECODER, "1024", source, TEXT * 50, change, weights="initial", cells=8, request=None
            )
        )
        assert [len(s["maps"][0][0]) for s in answer["sides"]] == [8] * len(answer["sides"])
        shapes.check(answer, LongContextResult, f"/long_context {source} {change}")
    unseen = shapes.unseen(LongContextResult)
    assert unseen == {"WeightsUsed": {"checkpoint", "step", "requested", "surgery"}}, unseen


def test_the_served_api_info_shows_the_typed_answers():
    from explorer.app.page.layout import build_app

    named = build_app().get_api_info()["named_endpoints"]  # what gradio_client's view_api() receives
    for name in ("logit_lens", "attribution", "ablation", "patching", "circuits", "long_context"):
        (returned,) = named[f"/{name}"]["returns"]
        shown = returned["python_type"]["type"]
        assert shown.startswith("dict(") and "Any" not in shown, (name, shown)
    assert "request" not in [p["parameter_name"] for p in named["/long_context"]["parameters"]]
