"""Transformer Family Explorer: the Gradio app (Hugging Face Spaces runs this file)."""

from explorer.app.page.start import build, launch  # light: each start-up step is said on stderr as it begins

demo = build()  # torch, gradio and the app imported and the page built (explorer/app/page/start.py)

if __name__ == "__main__":
    launch(demo)
