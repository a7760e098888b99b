"""Transformer Family Explorer: the Gradio app (Hugging Face Spaces runs this file)."""
import gc

from explorer.app.page.layout import LAUNCH_OPTIONS, build_app

gc.freeze()  # what the imports made lives as long as the server: the garbage collector skips it (0.1-0.4 s of start-up)
demo = build_app()

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)
