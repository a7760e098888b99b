"""The phone's jump button: on a phone the figures come first and the controls below them
(assets/style.css), so a control change is made far from its figure. A fixed button says "Result" while
the controls are on screen and jumps to the open tab's first figure, and "Controls" otherwise and jumps
back. It is a real button (a tap, Enter, Space) and a jump moves keyboard focus to where it scrolled.
Shown at phone widths only (assets/style.css); part of ``explorer.app.page.phone_js.PHONE_JS``.
"""

JUMP_JS = """() => {
  if (window.__phoneJump) return;
  window.__phoneJump = true;
  const jump = document.createElement('button');
  jump.id = 'phone-jump';
  jump.type = 'button';
  const target = () => {
    if (jump.dataset.to === 'controls') return document.getElementById('controls');
    const panel = [...document.querySelectorAll('#tabs [role="tabpanel"]')].find((p) => p.offsetParent !== null);
    const plot = panel && [...panel.querySelectorAll('.js-plotly-plot')].find((p) => p.offsetParent !== null);
    return (plot && plot.closest('.block')) || document.getElementById('tabs');
  };
  const label = () => {
    const controls = document.getElementById('controls');
    const inControls = controls && controls.getBoundingClientRect().top < window.innerHeight * 0.5;
    const to = inControls ? 'result' : 'controls';
    if (jump.dataset.to === to) return;
    jump.dataset.to = to;
    jump.textContent = inControls ? '\\u2191 Result' : 'Controls \\u2193';
    jump.setAttribute('aria-label', inControls ? 'Jump to the figure of the open tab' : 'Jump to the controls');
  };
  jump.addEventListener('click', () => {
    const el = target();
    if (!el) return;
    const y = el.getBoundingClientRect().top + window.scrollY - 8;
    window.scrollTo({top: Math.max(0, y), behavior: 'instant'});
    if (!el.hasAttribute('tabindex')) el.setAttribute('tabindex', '-1');
    el.focus({preventScroll: true});
    label();
  });
  // inside `.contain`: Gradio scopes the page's stylesheet to `.gradio-container .contain`
  const mount = () => { const app = document.querySelector('.gradio-container .contain');
    if (!app || jump.isConnected) return !!app; app.prepend(jump); label(); return true; };
  if (!mount()) { const w = new MutationObserver(() => { if (mount()) w.disconnect(); });
    w.observe(document.body, {childList: true, subtree: true}); }
  window.addEventListener('scroll', label, {passive: true});
  window.addEventListener('resize', label);
}"""
