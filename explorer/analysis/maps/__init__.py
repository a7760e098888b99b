"""Attention maps of a config on a text: the maps (``attention.py``), each head's per-text label
(``heads.py``) and the maps' Plotly figure memoised beside them (``figure_memo.py``)."""
