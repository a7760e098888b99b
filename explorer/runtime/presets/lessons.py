"""Presets for a lesson: a family at the size and text where its difference shows."""

from __future__ import annotations

from .classic import CLASSIC

# Presets for a lesson: the size and the text at which a family's difference shows. The placements'
# per-layer gradient norms separate with depth (Xiong et al. 2020; at initialisation here, attention
# out-projection, last / first layer: pre-LN 0.52 at 4 layers, 0.29 at 12; post-LN 0.98 and 0.91),
# and on a 100-byte text BigBird's blocks cover 49.9% of the pairs against 50.5% for causal full
# attention, so it looks like full attention: 256 bytes (the maps' cap) in blocks of 16 leave it
# 7 of 16 blocks per row.
LESSON_TEXT = (
    "Attention lets every token read every earlier token, so its cost grows with the square of "
    "the length. Sparse patterns keep a few keys per query: a local window, some global tokens "
    "and a few random blocks. At this length the blocks no longer cover the map."
)
LESSONS = {
    "Lesson: post-LN vs pre-LN gradients (12 layers)": (
        "Xiong et al. 2020 at a depth where it shows: 12 post-LN layers. The Gradients tab draws every "
        "placement per layer; their curves separate with depth, far more at 12 layers than at the default 4.",
        dict(n_layers=12, norm_placement="post"),
        None,
    ),
    "Lesson: BigBird vs full attention (256 bytes)": (
        "BigBird's window, global and random blocks on a text long enough (256 bytes) that they leave most "
        "of the map empty; pin it as A and switch the attention to full to compare.",
        dict(CLASSIC["BigBird (2020)"][1]),
        LESSON_TEXT,
    ),
    "Lesson: sliding window vs full (256 bytes)": (
        "A 32-key sliding window on 256 bytes: the band a window keeps, against full attention's triangle.",
        dict(attention="sliding_window", window=32),
        LESSON_TEXT,
    ),
}
