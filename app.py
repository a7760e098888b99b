"""Transformer Family Explorer: the Gradio app (Hugging Face Spaces runs this file)."""
from explorer.app.layout import LAUNCH_OPTIONS, build_app

demo = build_app()

if __name__ == "__main__":
    demo.launch(**LAUNCH_OPTIONS)
