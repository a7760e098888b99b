"""Transformer Family Explorer: the Gradio app (Hugging Face Spaces runs this file)."""

import gc

# Start-up makes millions of objects (torch, gradio, the page) that live as long as the server; the cyclic
# garbage collector went through all of them again and again while they were made: about 1 s of a 5 s start.
gc.disable()

from explorer.app.page.layout import LAUNCH_OPTIONS, build_app  # noqa: E402

gc.freeze()  # what the imports made: the collector skips it from now on
demo = build_app()
gc.collect()  # the build's own cyclic garbage (~14,000 objects, 0.04 s)
gc.freeze()  # the page and its first figures live as long as the server too
gc.enable()

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)
