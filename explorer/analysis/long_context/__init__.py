"""The long-context view: pooled attention maps, statistics and per-token loss at thousands of tokens
(``view.py``), on the passage it reads (``text.py``)."""
