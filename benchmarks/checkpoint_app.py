"""What a realistic-size pretrained checkpoint costs in the app, handler by handler.

``python -m benchmarks.checkpoint_app [--model smollm-135m] [--text-bytes 256]`` builds the model with random
weights in ``transformers`` at its real sizes (``benchmarks.checkpoint_load.MODELS``; nothing is
downloaded), saves it with the byte tokenizer (``models.hf.byte_tokenizer``: one token per byte, so the
text's length in tokens is its length in bytes) into a temporary folder offered through
``EXPLORER_CHECKPOINTS``, then times the app's own handlers as a visitor's clicks run them: choosing
the checkpoint (read, cold), the Attention tab's first draw, the Gradients / Model tabs, a 64-key window
(the weights line's perplexity, the maps), and the Surgery tab. Each row is one cold call (nothing memoised
before it). Needs ``transformers`` (requirements-dev). Ends with the ``machine:`` line.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import torch

from benchmarks.checkpoint_load import MODELS
from kernels.tools.busy import BusyWatch


def _timed(rows: list, what: str, fn):
    t0 = time.perf_counter()
    out = fn()
    rows.append((what, time.perf_counter() - t0))
    return out


def run(model: str, text_bytes: int) -> list:
    import transformers

    from explorer.analysis.weights import checkpoints
    from explorer.app.controls import weights as W
    from explorer.app.controls.fields import CONTROL_FIELDS, config_values
    from explorer.app.page.wiring import stage_handler
    from explorer.app.tabs.attention import refresh_attention
    from explorer.app.tabs.surgery import refresh_surgery
    from explorer.runtime.text import DEFAULT_TEXT
    from models import ModelConfig
    from models.hf.byte_tokenizer import byte_tokenizer_json

    config_cls, model_cls, fields = MODELS[model]
    torch.manual_seed(0)
    hf = getattr(transformers, model_cls)(getattr(transformers, config_cls)(**fields)).eval()
    text = (DEFAULT_TEXT * (text_bytes // len(DEFAULT_TEXT) + 1))[:text_bytes]
    rows = []
    with tempfile.TemporaryDirectory(prefix="ckpt-app-") as root:
        folder = os.path.join(root, model)
        hf.save_pretrained(folder, safe_serialization=True)
        with open(os.path.join(folder, "tokenizer.json"), "w") as f:
            f.write(byte_tokenizer_json())
        del hf
        os.environ[checkpoints.ROOTS_ENV] = root
        choice = W.CKPT + model
        values = config_values(ModelConfig())
        out = _timed(rows, "choose it (plan, read, digest)", lambda: W.switch(values, choice, None, None))
        values = {k: out[k]["value"] if isinstance(out.get(k), dict) else values[k] for k in CONTROL_FIELDS}
        draw = W.attention_with_weights(lambda v, **kw: refresh_attention(v, **kw))
        _timed(
            rows,
            f"Attention tab: maps of {text_bytes} tokens",
            lambda: draw(values, trained=None, weights=choice, text=text, state=None, separator=None),
        )
        _timed(
            rows,
            "Gradients + Model tabs (128 tokens)",
            lambda: W.with_weights(stage_handler("analysis"))(values, trained=None, weights=choice, text=text),
        )
        window = {**values, "attention": "sliding_window", "window": 64}
        _timed(
            rows,
            "a 64-key window: maps + perplexity line",
            lambda: draw(window, trained=None, weights=choice, text=text, state=None, separator=None),
        )
        _timed(
            rows,
            "Surgery tab (difference view)",
            lambda: W.with_weights(refresh_surgery)(window, trained=None, weights=choice, text=text),
        )
        loaded = checkpoints.load(model)
        rows.insert(
            0,
            (
                f"{model}: {loaded.n_params / 1e6:.1f} M parameters, {loaded.config.n_layers} layers x "
                f"{loaded.config.n_heads} heads",
                None,
            ),
        )
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.checkpoint_app", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="smollm-135m", choices=list(MODELS))
    ap.add_argument("--text-bytes", type=int, default=256)
    args = ap.parse_args(argv)
    from explorer.runtime.device import configure_threads

    configure_threads()  # as the app runs its computations
    with BusyWatch() as busy:
        rows = run(args.model, args.text_bytes)
    print("| step | seconds |\n| --- | ---: |")
    for what, s in rows:
        print(f"| {what} | {'' if s is None else f'{s:.2f}'} |")
    print(f"\nthreads: {torch.get_num_threads()} (the app's EXPLORER_THREADS); {busy.note()}")


if __name__ == "__main__":
    main()
