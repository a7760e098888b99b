"""What a visitor reads when a request fails: the ConfigError itself, or a plain line with an incident
number; the exception's own text (allocator sizes, type names, recursion) never reaches the page."""

import html
import logging
import re

import pytest

from explorer.app.server.messages import problem, refused
from models import ConfigError


def test_a_config_error_is_shown_as_it_is():
    assert problem(ConfigError("n_heads", 3, "a divisor of d_model")) == "n_heads=3 is not valid: a divisor of d_model"


@pytest.mark.parametrize(
    "exc, secret",
    [
        (RecursionError("maximum recursion depth exceeded while calling a Python object"), "recursion"),
        (TypeError("unsupported operand type(s) for +: 'NoneType' and 'int'"), "NoneType"),
        (OverflowError("cannot convert float infinity to integer"), "infinity"),
        (KeyError("/etc/passwd"), "passwd"),
    ],
)
def test_an_internal_error_is_a_generic_line_with_an_incident_logged_for_the_host(exc, secret, caplog):
    with caplog.at_level(logging.ERROR):
        msg = problem(exc)
    assert secret not in msg and type(exc).__name__ not in msg and "incident" in msg
    incident = msg.split("incident ")[1][:8]
    assert any(incident in r.getMessage() and r.exc_info for r in caplog.records)  # the host can find it


def test_running_out_of_memory_says_so_without_the_allocator_text():
    msg = problem(
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 268435456 bytes"
        )
    )
    assert "ran out of memory" in msg and "alloc_cpu" not in msg and "268435456" not in msg


def test_toasts_are_html_not_markdown(monkeypatch):
    """A toast renders HTML: a Markdown escape ("n\\_layers") would show its backslash to the visitor."""
    from explorer.app.controls import weights as ui_weights

    toasts = []
    monkeypatch.setattr(ui_weights.gr, "Warning", lambda msg, *a, **k: toasts.append(msg))
    monkeypatch.setattr(ui_weights.gr, "Info", lambda msg, *a, **k: toasts.append(msg))
    out = ui_weights.switch({}, weights="your_run <b>*x*</b>")
    assert toasts and "weights=" in toasts[0] and "your_run" in toasts[0]
    assert "\\" not in toasts[0] and "<b>" not in toasts[0] and "&lt;b&gt;" in toasts[0]
    assert "\\_" in out["status"]  # the status line is Markdown, so there the escape belongs


def test_a_refusal_lists_every_valid_choice_whole_and_cuts_only_the_echoed_value():
    from models import choices

    valid = choices()["attention"]
    msg = problem(ConfigError("attention", "x" * 5000, f"one of {valid}"))
    assert all(repr(k) in msg for k in valid)  # no choice cut mid-word (the old message stopped at 'synth…)
    assert msg.startswith("attention='xxx") and "(5,002 characters in all)" in msg


def test_an_over_long_list_of_valid_values_is_cut_between_words():
    allowed = ", ".join(f"choice_{i:04d}" for i in range(400))
    msg = problem(ConfigError("field", "v", allowed))
    kept = msg.split("is not valid: ")[1].split("…")[0]
    assert kept.split(", ")[-1] in allowed.split(", ") and len(msg) < 2200


def test_a_refusal_is_raised_without_a_traceback_in_the_console():
    err = refused(ConfigError("window", 0, "an integer >= 1"))
    assert err.print_exception is False and "window=0 is not valid" in err.message


def test_a_status_line_is_cut_between_words_never_inside_one():
    """Every status line and toast (``shown`` / ``shown_html``) cuts a long text at a comma or a space: the
    old cut stopped a list of choices inside a name (``'synth… (411 characters in all)``)."""
    from explorer.runtime.untrusted import shown, shown_html

    names = [f"synthesizer_{i:03d}" for i in range(60)]
    text = f"attention='x' is not valid: one of {names}"
    for show in (shown, shown_html):
        kept = html.unescape(show(text, 290)).replace("\\", "")
        head, tail = kept.split("…")
        assert tail == f" ({len(text):,} characters in all)" and len(head) <= 290
        assert head.endswith("'") and all(n in names for n in re.findall(r"'(\w+)'", head.split("of ", 1)[1]))
    assert shown("x" * 10_000, 300).startswith("x" * 300 + "…")  # one long word: cut where the limit falls


def test_a_refusal_on_a_status_line_lists_every_choice():
    """A handler's status line (the Weights switch here) shows the whole refusal, not its first 300 characters."""
    from explorer.app.controls import weights as ui_weights
    from models import choices

    status = html.unescape(ui_weights.show_trained({"attention": "no_such"})["status"]).replace("\\", "")
    assert "attention='no_such' is not valid" in status and "characters in all" not in status
    assert all(repr(k) in status for k in choices()["attention"])


def test_a_refused_api_request_is_answered_without_a_traceback():
    """Through the endpoints themselves (a plain one and a heavy job): the refusal is the ``gr.Error`` Gradio's
    queue does not print a traceback for (``print_exception`` False), carrying the ConfigError's message."""
    import asyncio

    import gradio as gr

    from explorer.app.api import endpoints as api

    refusals = []
    for run in (
        lambda: api.api_analyze('{"attention": "no_such"}', ""),
        lambda: asyncio.run(api.api_benchmark("", "64", "sideways")),
    ):
        with pytest.raises(gr.Error) as err:
            run()
        refusals.append(err.value)
    assert [e.print_exception for e in refusals] == [False, False]
    assert "attention='no_such' is not valid" in refusals[0].message
    assert "mode='sideways' is not valid" in refusals[1].message
