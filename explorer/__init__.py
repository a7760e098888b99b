"""The explorer: experiments (config -> results), plots (results -> figures), presets and the Gradio UI.

``explorer.analysis.experiments`` and ``explorer.figures.base`` import no gradio; ``explorer.app.layout`` builds the app.
"""
