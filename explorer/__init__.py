"""The explorer: experiments (config -> results), plots (results -> figures), presets and the Gradio UI.

``explorer.experiments`` and ``explorer.plots`` import no gradio; ``explorer.ui`` builds the app.
"""
