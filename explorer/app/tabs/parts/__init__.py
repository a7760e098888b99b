"""Parts of the tabs that are not tabs: pickers, zoom boxes, the Train tab's pieces, the Why tab's views,
the widgets a model of several stacks adds (``stacks``). A part belongs to the tabs that build it."""
