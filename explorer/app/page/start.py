"""What ``python app.py`` does, each step said on stderr as it starts (on a busy machine the start-up takes a
minute, and Gradio prints nothing until it serves): ``build()`` imports torch, gradio and the app and builds
the page; ``launch(demo)`` starts the server.

The cyclic garbage collector is off while the page is built: start-up makes millions of objects (torch,
gradio, the page) that live as long as the server, and the collector went through all of them again and
again while they were made (about 1 s of a 5 s start). It is on again once the build's own garbage is
collected and everything made so far is frozen out of its way (``gc.freeze()``).
"""

import gc
import os
import sys


def say(step: str) -> None:
    """One line of start-up progress on stderr, at once (a line costs microseconds)."""
    print(f"[explorer] {step}", file=sys.stderr, flush=True)


def build():
    """The page (``layout.build_app``), built with the collector off; the collector on again afterwards."""
    gc.disable()
    say("importing torch, gradio and the explorer...")
    from explorer.app.page.layout import build_app

    gc.freeze()  # what the imports made: the collector skips it from now on
    say("building the page...")
    demo = build_app()
    gc.collect()  # the build's own cyclic garbage (~14,000 objects, 0.04 s)
    gc.freeze()  # the page and its first figures live as long as the server too
    gc.enable()
    return demo


def address() -> str:
    """Where Gradio's launch serves (its defaults, or GRADIO_SERVER_NAME / GRADIO_SERVER_PORT)."""
    return f"http://{os.environ.get('GRADIO_SERVER_NAME', '127.0.0.1')}:{os.environ.get('GRADIO_SERVER_PORT', '7860')}"


def launch(demo) -> None:
    """Serve ``demo`` with the app's launch options (Gradio takes the next free port if that one is taken)."""
    from explorer.app.page.layout import LAUNCH_OPTIONS

    say(f"starting the server on {address()} (or the next free port)...")
    demo.launch(**LAUNCH_OPTIONS)
