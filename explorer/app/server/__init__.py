"""The server's side of the app, below every page part: what keeps a public Space answering.

``request_limits`` (bodies, uploads, queue places and sessions bounded per request and per client address),
``visitors`` (who a request comes from), ``sessions`` (idle sessions expire), ``jobs`` (heavy work admitted per
family, one per visitor, low priority, stoppable), ``calls`` (one request counted as running, its failures
turned into messages; the API's weights door), ``messages`` (warnings and notices, escaped) and
``gradio_compat`` (the Gradio internals relied on). Nothing here knows a control, a tab or a figure.
"""
