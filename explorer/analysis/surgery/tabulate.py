"""The Surgery table computed: the held-out loss of a trained model under every change that keeps its weights.

``table(origin)`` scores each row of ``stored.rows_for(origin)`` on the held-out passage
(``loss.heldout_ids``) in windows of the trained length and of four times it; its trained-length column
of the row "as trained" is the model's one held-out number (``loss.heldout_loss``). ``write_table``
stores it beside the model, where ``stored.stored_table`` reads it.
"""

from __future__ import annotations

import json
import time

from explorer.analysis.common.memo import eval_model
from explorer.analysis.surgery.loss import HELDOUT_BYTES, heldout_ids, nats_per_token
from explorer.analysis.surgery.moved import weights_for
from explorer.analysis.surgery.origin import Origin
from explorer.analysis.surgery.stored import rows_for, table_path
from explorer.analysis.weights import checkpoints
from models import ConfigError, surgery


def table(origin: Origin, lengths: tuple | None = None, log=None, only: set | None = None) -> dict:
    """Held-out loss of every row (``only``: of these labels) at each length (default: the trained length
    and four times it)."""
    if not origin.lm:
        raise ConfigError(
            "model", origin.name, "a causal language model (a bundle trained on text, a checkpoint with a tokenizer)"
        )
    trained = origin.trained_length
    lengths = lengths or (trained, 4 * trained)
    data = heldout_ids(origin)
    out = []
    for label, cfg in rows_for(origin):
        if only is not None and label not in only:
            continue
        model = eval_model(
            cfg, weights_for(cfg, origin.name) if origin.kind == "checkpoint" else weights_for(cfg, bundle=origin.name)
        )
        row = {"label": label, "changed": list(surgery.changed_fields(origin.config, cfg)), "loss": {}}
        for L in lengths:
            t0 = time.perf_counter()
            try:
                row["loss"][str(L)] = round(nats_per_token(model, data, L), 4)
            except (RuntimeError, ConfigError) as e:  # a mechanism that cannot run this length: marked
                row["loss"][str(L)] = None
                row.setdefault("errors", {})[str(L)] = str(e)[:120]
            if log:
                log(f"{label} L={L}: {row['loss'][str(L)]} ({time.perf_counter() - t0:.1f} s)")
        out.append(row)
    return {
        "model": origin.name,
        "kind": origin.kind,
        "label": origin.label,
        "trained_length": trained,
        "window": origin.window,
        "lengths": list(lengths),
        "scored_tokens": len(data),
        "unit": origin.unit,
        "rows": out,
        "scoring": f"the first {HELDOUT_BYTES} bytes of the held-out split ({len(data)} tokens) cut into windows "
        "of each length; every position but the first of each window scored; windowed patterns "
        f"keep {origin.window} keys",
    }


def write_table(origin: Origin, log=None) -> dict:
    path = table_path(origin)
    if path is None:
        raise ConfigError(
            "checkpoint", origin.name, f"a checkpoint folder this host offers: {sorted(checkpoints.offered())}"
        )
    result = table(origin, log=log)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result
