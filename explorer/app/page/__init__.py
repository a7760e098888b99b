"""The page frame: ``layout`` builds the page from the registered tabs (``explorer.app.tabs.TABS`` (the registry)),
``wiring`` connects the page's events (the redraw chain, the sources that fill every control, the tabs'
own events through their ``wire``), and the page scripts (``fit_js``, ``keyboard_js``, ``render_once_js``,
``share_js``). The top floor of ``explorer.app``: nothing imports it but ``app.py``."""
