"""A keyboard user keeps their place: a script installed once on page load.

Gradio's dropdown blurs its input when an option is picked with Enter, so focus falls to ``<body>``:
the next change starts again from the top of the page (14 Tabs to get back to the control) and typed
filter text goes nowhere. ``KEYBOARD_JS`` listens for Enter on a dropdown's input (capture phase,
before Gradio's handler) and, once Gradio has handled it, puts focus back on the same control when
nothing else holds it (the input itself, or the one of the same block when Gradio re-rendered it),
then closes the option list the refocus opened (Escape, as a keyboard user would). A mouse pick is
left alone. The visible focus ring is the stylesheet's (``:focus-visible``).
"""

KEYBOARD_JS = """() => {
  if (window.__keepFocus) return;
  window.__keepFocus = {restored: 0};
  const dropdown = (el) => el instanceof HTMLInputElement && !!el.closest('.wrap-inner')
    && (el.getAttribute('role') === 'listbox' || el.hasAttribute('aria-expanded') || !!el.closest('[data-testid="dropdown"]'));
  document.addEventListener('keydown', (e) => {
    if (e.key !== 'Enter' || e.isComposing || !dropdown(e.target)) return;
    const input = e.target, block = input.closest('.block[id]'), id = block && block.id;
    const back = () => {
      const active = document.activeElement;
      if (active && active !== document.body && active !== document.documentElement) return;
      const again = input.isConnected ? input : id && document.querySelector('#' + CSS.escape(id) + ' .wrap-inner input');
      if (!again) return;
      again.focus({preventScroll: true});
      again.dispatchEvent(new KeyboardEvent('keydown', {key: 'Escape', code: 'Escape', bubbles: true}));
      window.__keepFocus.restored++;
    };
    for (const ms of [0, 60, 300]) setTimeout(back, ms);
  }, true);
}"""  # noqa: E501 (JavaScript kept verbatim)
