"""One API request: counted as running, charged to its visitor, stopped when nobody waits for it, its failures
turned into a message, its config and weights read once.

``call`` and ``heavy_call`` wrap every documented endpoint (``explorer.app.api.endpoints`` and the tabs' own
endpoints): a failure becomes ``gr.Error`` with the message only (naming the field and what it accepts,
truncated), never a traceback. Inside ``call`` the work

- is charged to its visitor (``explorer.runtime.cost.visitor``: the analyses' ``cost.charge`` refuse a request
  over the per-request budget or the visitor's share by name before it runs), and its measured CPU seconds go
  into the visitor's share (``explorer.runtime.fair.LEDGER``) when it ends;
- stops between two modules of any forward pass once its client goes away or nobody opened its result
  stream (``explorer.runtime.stopping.stop_when`` with ``streams.gone_probe``);
- runs in a fresh thread at the lowest CPU priority when its visitor is over a part of its share
  (``fair.over_share``) or has more than ``fair.LIGHT_EVENTS`` events in the queue while another visitor has
  work in the queue, so the cores go to the other visitors first (a visitor alone keeps full priority).

``request_source`` is the API's door to the weights: the ``weights`` choice resolved once into an
``explorer.analysis.source.WeightsSource``, a checkpoint loaded once.
"""

from __future__ import annotations

import contextvars
import threading
import time

import gradio as gr

from explorer.analysis import source as weights_source
from explorer.analysis.source import WeightsSource
from explorer.analysis.weights import checkpoints
from explorer.app.server import visitors
from explorer.app.server.gradio_compat import event_request, events_of_current, others_in_queue
from explorer.app.server.jobs import low_priority, run_job
from explorer.app.server.messages import refused
from explorer.app.server.streams import gone_probe
from explorer.runtime import cost, fair
from explorer.runtime.configs import app_config
from explorer.runtime.load import LOAD
from explorer.runtime.stopping import Abandoned, stop_when
from explorer.runtime.text import as_text, default_text
from explorer.runtime.untrusted import load_json, truncate
from models import ConfigError

API_WEIGHTS = (weights_source.BUNDLED, weights_source.INITIAL, weights_source.CHECKPOINT_PREFIX + "<id>")


_INSIDE: contextvars.ContextVar = contextvars.ContextVar("explorer_call", default=False)


def call(fn):
    """``fn()`` counted as one running request, charged and stoppable (see the module docstring); any failure
    -> ``gr.Error`` with the message only."""
    try:
        with LOAD.busy():
            return fn() if _INSIDE.get() else _charged(fn)
    except gr.Error:
        raise
    except Abandoned:  # its client left or never read it: nobody to answer, nothing to log
        raise gr.Error("Stopped: nobody is waiting for this request any more.", print_exception=False) from None
    except Exception as exc:  # a refusal (ConfigError) is an answer, not a fault: no traceback in the log
        raise refused(exc) from None


def _charged(fn):
    request = event_request()
    address = visitors.of_request(request) if request is not None else None
    if address is None and visitors.CURRENT.get() is not None:
        address = visitors.current()
    token = _INSIDE.set(True)
    try:
        with cost.visitor(address) as seen, stop_when(gone_probe()):
            crowded = address is not None and events_of_current(visitors.of_request, address) > fair.LIGHT_EVENTS
            if (crowded or fair.over_share(address)) and yielding_helps(address):
                result, spent = _yielding(fn)
            else:
                t0 = time.thread_time()
                try:
                    result = fn()
                finally:
                    spent = time.thread_time() - t0
                    fair.LEDGER.add(address, spent)
            cost.LEARNED.observe(seen["kind"], seen["predicted"], spent)
            return result
    finally:
        _INSIDE.reset(token)


def yielding_helps(address) -> bool:
    """Yielding the cores helps only when another visitor has work in the queue: a visitor alone (a speaker on
    their own server, a test's one address) keeps full priority however much of its share it used."""
    return address is not None and others_in_queue(visitors.of_request, address)


def _yielding(fn):
    """``fn()`` in a fresh thread at the lowest CPU priority (this context copied) -> ``(result, CPU seconds)``;
    its exception re-raised here."""
    out: dict = {}
    address = cost.current_visitor()

    def run():
        low_priority()
        t0 = time.thread_time()
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc
        finally:
            out["spent"] = time.thread_time() - t0
            fair.LEDGER.add(address, out["spent"])

    worker = threading.Thread(target=contextvars.copy_context().run, args=(run,), name="explorer-yielding", daemon=True)
    worker.start()
    worker.join()
    if "error" in out:
        raise out["error"]
    return out["result"], out["spent"]


async def heavy_call(family: str, request, fn):
    """``fn(should_stop)`` as a heavy job of ``family`` (``explorer.app.server.jobs.run_job``); failures, "busy"
    included, -> ``gr.Error`` with the message only."""
    try:
        return await run_job(family, request, lambda should_stop: call(lambda: fn(should_stop)))
    except gr.Error:
        raise
    except Exception as exc:
        raise refused(exc) from None


def request_text(cfg, text) -> str:
    """An API call's text: None or "" -> the config's example text; anything but a string is refused."""
    return as_text(text, default=default_text(cfg))


def request_source(config_json, weights) -> WeightsSource:
    """An API call's config and weights, resolved once: ``bundled`` (None or "", the default) draws the
    bundled model that serves the config (trained with it, or moved to it by surgery) and falls back to the
    initial weights with the reason; ``initial`` never loads one; ``checkpoint:<id>`` draws a pretrained
    checkpoint the host offers, loaded once, with ``config_json``'s fields as its surgery (empty: the
    checkpoint as trained; a field that needs other weights is refused naming it)."""
    choice = weights_source.BUNDLED if weights in (None, "") else weights
    ckpt = weights_source.checkpoint_id(choice)
    if ckpt is None:
        if choice not in (weights_source.BUNDLED, weights_source.INITIAL):
            raise ConfigError("weights", truncate(str(choice), 40), f"one of {list(API_WEIGHTS)}")
        return weights_source.resolve(choice, app_config(config_json))
    changes = {} if config_json in (None, "") else load_json(config_json)
    if not isinstance(changes, dict):
        raise ConfigError("config", type(changes).__name__, "a JSON object of the fields to change on the checkpoint")
    loaded = checkpoints.load(ckpt)
    return weights_source.resolve(choice, weights_source.checkpoint_config(loaded, changes), loaded=loaded)
