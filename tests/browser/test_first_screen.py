"""The first screen on a laptop (1440 x 900) and a projector (1280 x 720), measured in Debian's Chromium: the
attention grid of the trained model starts on it with most of its panels visible, one line over it says what it
shows, and the per-text head table comes after the grid (it used to sit between them, pushing the grid's top to
y = 843 at 1440 x 900)."""

import pytest

# -> [grid block's page y, its height, the head table's page y, the reading line's page y and height]
FIRST_SCREEN_JS = """() => { const y = (sel) => { const e = document.querySelector(sel), b = e.getBoundingClientRect();
    return [b.top + scrollY, b.height]; };
  const [gridY, gridH] = y('#attention-grid'), [tableY] = y('#head-types'), [lineY, lineH] = y('#maps-reading');
  return [gridY, gridH, tableY, lineY, lineH]; }"""


@pytest.mark.parametrize("width,height,visible", [(1440, 900, 0.5), (1280, 720, 0.35)])
def test_the_grid_is_on_the_first_screen_and_the_head_table_after_it(open_page, width, height, visible):
    page = open_page(viewport={"width": width, "height": height})
    p = page.page
    page.settle()
    grid_y, grid_h, table_y, line_y, line_h = p.evaluate(FIRST_SCREEN_JS)
    page.shot(f"first-screen-{width}x{height}")
    assert grid_y < height, f"the grid starts at y = {grid_y:.0f}, below the {height} px screen"
    shown = (height - grid_y) / grid_h
    assert shown >= visible, f"{shown:.0%} of the grid ({grid_h:.0f} px from y = {grid_y:.0f}) on the first screen"
    assert line_y < grid_y and line_h < 120, (line_y, line_h, grid_y)  # one line (two where it wraps) over the grid
    assert table_y > grid_y, f"the head table (y = {table_y:.0f}) is over the grid (y = {grid_y:.0f})"
    reading = p.locator("#maps-reading").inner_text()
    assert "byte tokens" in reading and "layers" in reading and "Head types" not in reading, reading
    assert "Head types on this text" in p.locator("#head-types").inner_text()
    page.check_clean()
