"""The Gradio app, the only part of the code that imports gradio, in five folders on five floors (a module
imports only its floor and those below): ``server`` (limits per visitor, sessions, heavy jobs, one API
request), ``controls`` (the config controls, the session's state, links, uploads, the Weights choice),
``tabs`` (one module per tab, registered in ``tabs.TABS``; what a tab is: ``tabs.contract``), ``api`` (the
documented endpoints and the export) and ``page`` (the page frame and its events: ``page.layout.build_app``)."""

from explorer.app.server.gradio_import import skip_stub_writer

skip_stub_writer()  # before any module of the app imports gradio: its start-up skips writing type stubs
