"""The Gradio internals behind ``explorer.app.server.gradio_compat`` that guard the public app: error messages
cut to a bound (Gradio's own validation quotes a refused value whole)."""

import gradio as gr


def test_gradios_error_messages_are_cut_to_a_bound():
    import gradio.queueing
    import gradio.utils

    from explorer.app.server.gradio_compat import shorten_errors

    shorten_errors(600)
    shorten_errors(600)  # once only: the wrapper is not wrapped again
    assert gradio.queueing.error_payload is gradio.utils.error_payload
    refused = gr.Error("Value: '" + "x" * 1_000_000 + "' is not in the list of choices: ['a', 'b']")
    message = gradio.utils.error_payload(refused, True)["error"]
    assert len(message) <= 600 and message.startswith("Value: 'xxx") and message.endswith("['a', 'b']")
    assert gradio.utils.error_payload(gr.Error("short"), True)["error"] == "short"
