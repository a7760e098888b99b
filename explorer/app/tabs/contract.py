"""What a tab is to the page: one record per tab (``Tab``), listed once in ``explorer.app.tabs.TABS``.

The page frame (``explorer.app.page``) knows no tab by name. It builds every registered tab in order
inside its ``gr.Tabs`` (``build``), runs each tab's ``steps`` in the redraw chain that follows every
commit, calls each tab's ``wire`` for its own events and endpoints, asks each tab's ``export`` for its
part of the zip, and leaves each tab's share-link parameters (``link``) to that tab. A new tab is
therefore its module (and its figures) plus one line in the registry.

The redraw chain. A commit (a control, a preset, a link, Undo, the Weights switch, ...) runs one
request for the attention grid (the page's first answer, which also writes the controls, the status
line and the share link), then one request per stage of ``STAGES`` in order; the steps of every tab
in one stage share that request (their handlers run one after the other, their outputs merged), so a
tab added to an existing stage costs no extra request. Each step's handler is called as
``fn(values, weights=<the request's WeightsSource or None>, **named)``: ``values`` the control values by
``ModelConfig`` field, ``named`` the step's ``inputs`` by name (renamed by ``rename``), and returns
``{output name: value}``; it must skip (``gr.skip()``) when ``state["fresh"]`` says the grid drew nothing new.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property

from models import ModelConfig

# the chain's stages after the grid, in the order they run (each one request)
STAGES = ("detail", "views", "analysis", "surgery")


@dataclass(frozen=True)
class Landing:
    """What the page opens on, for the tabs' first paint (drawn before any request): the default config,
    the landing text and the weights record drawn (None: initial weights)."""

    cfg: ModelConfig
    text: str
    weights: object = None


@dataclass(frozen=True)
class Step:
    """A tab's part of one stage of the redraw chain (module docstring). ``inputs``: component names
    beyond the control values; ``rename``: component name -> the handler's argument name; ``on_load``:
    draw on the page's load even when the grid drew nothing new (its ``state`` input is left out then);
    ``progress_on``: where the stage's loading status shows when this step is its first (default: its first
    output; one or two components, not every output)."""

    stage: str
    fn: Callable
    inputs: tuple
    outputs: tuple
    rename: dict = field(default_factory=dict)
    on_load: bool = False
    progress_on: tuple = ()

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"stage={self.stage!r}: one of {STAGES}")


@dataclass
class ExportScene:
    """What the export draws from, resolved once for every tab's part: the config, the text, its
    separator, the request's weights source and its record for ``cfg`` (``w``), the session's state dict,
    the zoomed head, the pinned A of Compare, the Train tab's state and the values of the tabs'
    ``export_inputs`` (``extra``, by name). ``maps``: the attention maps of
    ``cfg`` with ``w``, computed once for the tabs that show them."""

    cfg: ModelConfig
    text: str
    separator: object
    weights: object
    w: object
    session: dict
    zoom: tuple | None = None
    pinned: dict | None = None
    train_state: dict | None = None
    extra: dict = field(default_factory=dict)

    @cached_property
    def maps(self):
        from explorer.analysis import attention_maps

        return attention_maps(self.cfg, self.text, separator=self.separator, weights=self.w)


@dataclass(frozen=True)
class Tab:
    """One tab. ``id``: its ``gr.Tab`` id and the share link's ``tab=`` value. ``build(landing) -> {name:
    component}``: its components, created inside the page's ``gr.Tabs`` (and, for ``toolbar``, in the
    button row above the tabs). ``steps``: its parts of the redraw chain. ``wire(page)``: its own events
    and endpoints (``page``: ``explorer.app.page.wiring.Page``). ``export(scene) -> [(title, [(stem,
    figure), ...]), ...]``: its sections of the zip, and ``export_sweeps(session) -> [(series, attention,
    records), ...]``: its sweeps' rows for the zip's CSV; ``export_inputs``: its components whose values the
    page's Export button hands the export (``ExportScene.extra``, by name). ``link``: the share-link parameters it reads
    itself (the page's link reader leaves them alone); ``from_link(request) -> {name: value}``: what it sets
    from them within the page's own link event (``link_outputs``: those names), for a tab whose events
    follow that event (a tab may instead read its parameters in an event of its own, in ``wire``)."""

    id: str
    build: Callable
    steps: tuple = ()
    wire: Callable | None = None
    export: Callable | None = None
    export_sweeps: Callable | None = None
    export_inputs: tuple = ()
    link: tuple = ()
    from_link: Callable | None = None
    link_outputs: tuple = ()
    toolbar: Callable | None = None


@dataclass(frozen=True)
class Page:
    """What a tab's ``wire`` is handed: the Blocks (``demo``), every component by name (``ui``:
    ``explorer.app.controls.events.Components``) and ``loaded``, the page-load chain's first event (the
    link read into the controls), for a tab that follows a link once the controls hold it."""

    demo: object
    ui: object
    loaded: object = None
