"""The Train tab on its own: ``python -m benchmarks.train_tab`` (host/port from GRADIO_SERVER_NAME /
GRADIO_SERVER_PORT, as ``app.py``). Used by the browser test and for working on the tab alone."""

from __future__ import annotations

import gradio as gr

from explorer.app.tabs.train import build_train_tab
from explorer.runtime.device import configure_threads


def build_demo() -> gr.Blocks:
    configure_threads()
    with gr.Blocks(title="Transformer Family Explorer: Train", analytics_enabled=False) as demo:
        with gr.Tab("Train"):
            build_train_tab()
    return demo


if __name__ == "__main__":
    build_demo().queue().launch()
