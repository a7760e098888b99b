"""``explorer.app.page.plotly_build``: Gradio's plot module rebuilt around Plotly's cartesian bundle.

References: Gradio's installed module itself (its imports and its component kept byte for byte, only the
Plotly expression replaced), the vendored bundle's own text, Brotli and gzip decompression back to the plain
module, plotly.py's list of trace types against every trace type the figures' source names, and the registered
trace types inside the vendored bundle."""

from __future__ import annotations

import asyncio
import gzip
import re
from pathlib import Path

import brotli
import plotly.graph_objects as go
import pytest
from plotly.basedatatypes import BaseTraceType

from explorer.app.page import plotly_build as pb
from explorer.app.page.transport import early_module_tag, with_tag

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def gradio_module() -> str:
    path = pb.gradio_module_path()
    assert path is not None, "Gradio's plot module not found: the rebuild would be skipped"
    return path.read_text(encoding="utf-8")


def test_the_rebuilt_module_keeps_gradios_imports_and_component_and_holds_the_bundle(gradio_module):
    bundle = pb.BUNDLE.read_text(encoding="utf-8")
    out = pb.splice(gradio_module, bundle)
    assert out is not None
    start = pb.START.search(gradio_module)
    end = pb.END.search(gradio_module)
    assert out.startswith(gradio_module[: start.start()])  # Gradio's imports, unchanged
    assert gradio_module[start.start() :].startswith("var ")
    assert out.endswith(gradio_module[end.end() :])  # its Svelte component, unchanged
    assert "\n" + bundle + "\n" in out  # the bundle, verbatim
    assert "plotly.js (cartesian - minified) v3.4.0" in out
    assert "p.default.react" in gradio_module[end.end() :] or ".react(" in gradio_module[end.end() :]
    assert len(out) < len(gradio_module) / 3, (len(out), len(gradio_module))


@pytest.mark.parametrize(
    "text",
    [
        'import"./a.js";var p=r(f(((e,t)=>{X return window.Plotly=e,e})}))()),m=1;'
        "return window.Plotly=e,e})}))()),",  # the end found twice
        "let x=1;var p=r(f(((e,t)=>{X return window.Plotly=e,e})}))()),m=1;",  # code before the expression
        'import"./a.js";var p=1;',  # no Plotly expression
    ],
)
def test_a_module_laid_out_otherwise_is_left_to_gradio(text):
    assert pb.splice(text, "BUNDLE") is None


def test_a_minimal_module_is_spliced_where_expected():
    text = 'import{a as r,b as f}from"./i.js";var p=r(f(((e,t)=>{OLD return window.Plotly=e,e})}))()),m=2;export{m};'
    assert pb.splice(text, "NEW") == (
        'import{a as r,b as f}from"./i.js";var p=r(f(((exports,module)=>{\nNEW\n}))()),m=2;export{m};'
    )


def test_each_encoding_decompresses_to_the_plain_module():
    served = pb.plot_module()
    assert served is not None and served.name == pb.gradio_module_path().name
    br, enc = served.body("gzip, deflate, br")
    assert enc == "br" and brotli.decompress(br) == served.plain
    gz, enc = served.body("gzip")
    assert enc == "gzip" and gzip.decompress(gz) == served.plain
    assert served.body("identity") == (served.plain, None)
    assert len(br) < 500_000, len(br)  # Gradio's full build: 1.25 MB as Brotli


def _trace_names() -> set:
    classes = [getattr(go, name) for name in go.__all__]  # plotly.graph_objects loads its classes lazily
    return {cls().type for cls in classes if isinstance(cls, type) and issubclass(cls, BaseTraceType)}


def test_every_trace_type_the_figures_draw_is_in_the_bundle():
    traces = _trace_names()
    assert {"scatter", "heatmap", "bar", "scatter3d", "sankey"} <= traces
    used = set()
    for path in (ROOT / "explorer").rglob("*.py"):
        src = path.read_text()
        used |= {c.lower() for c in re.findall(r"\bgo\.([A-Z]\w*)\(", src) if c.lower() in traces}
        used |= {t for t in re.findall(r"""type["']?\s*[=:]\s*["'](\w+)["']""", src) if t in traces}
    assert used and used <= set(pb.TRACES), used - set(pb.TRACES)
    bundle = pb.BUNDLE.read_text(encoding="utf-8")
    registered = set(re.findall(r'moduleType:"trace",name:"(\w+)"', bundle))
    assert set(pb.TRACES) <= registered, set(pb.TRACES) - registered


def _asgi(scope_headers: dict, served) -> tuple[int, dict, bytes]:
    sent = []

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/assets/" + served.name,
        "headers": [(k.encode(), v.encode()) for k, v in scope_headers.items()],
    }
    asyncio.run(pb.answer(served, scope, send))
    start, body = sent
    return start["status"], {k.decode(): v.decode() for k, v in start["headers"]}, body["body"]


def test_the_answer_negotiates_and_revalidates():
    served = pb.plot_module()
    status, headers, body = _asgi({"accept-encoding": "br"}, served)
    assert status == 200 and headers["content-encoding"] == "br" and int(headers["content-length"]) == len(body)
    assert headers["content-type"].startswith("text/javascript") and headers["etag"] == served.etag
    status, headers, body = _asgi({"if-none-match": served.etag}, served)
    assert status == 304 and body == b""
    assert pb.is_module_request({"method": "GET", "path": "/space/assets/" + served.name}, served.name)
    assert not pb.is_module_request({"method": "POST", "path": "/assets/" + served.name}, served.name)


def test_the_early_tag_goes_right_after_gradios_entry_script_once():
    tag = early_module_tag()
    assert tag.startswith(b'<script type="module" async') and pb.gradio_module_path().name.encode() in tag
    entry = b'<script type="module" crossorigin src="./assets/index-Ab1_x.js"></script>'
    doc = b"<html><head>" + entry + b"</head><body></body></html>"
    out = with_tag(doc, tag)
    assert out == b"<html><head>" + entry + tag + b"</head><body></body></html>"
    assert with_tag(out, tag) == out  # never twice
    assert with_tag(b"<html>other page</html>", tag) == b"<html>other page</html>"
