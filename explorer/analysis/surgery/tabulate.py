"""The Surgery table computed: the held-out loss of a trained model under every change that keeps its weights.

``table(origin)`` scores each row of ``stored.rows_for(origin)`` on the held-out passage
(``loss.heldout_ids``) in windows of the trained length and of four times it; its trained-length column
of the row "as trained" is the model's one held-out number (``loss.heldout_loss``). A row that shrinks the
KV cache also carries its ``family`` and ``cache_bytes_per_token`` (``frontier.py``), and ``latent`` holds the
K/V latent rows (``latent.py``): together, the KV-cache frontier. ``write_table``
stores it beside the model, where ``stored.stored_table`` reads it.
"""

from __future__ import annotations

import json
import time

from explorer.analysis.common.memo import eval_model
from explorer.analysis.surgery import frontier, latent
from explorer.analysis.surgery.loss import HELDOUT_BYTES, heldout_ids, nats_per_token
from explorer.analysis.surgery.moved import weights_for
from explorer.analysis.surgery.origin import Origin
from explorer.analysis.surgery.stored import rows_for, table_path
from explorer.analysis.weights import checkpoints
from models import ConfigError, surgery


def table(
    origin: Origin, lengths: tuple | None = None, log=None, only: set | None = None, known: dict | None = None
) -> dict:
    """Held-out loss of every row (``only``: of these labels) at each length (default: the trained length
    and four times it). ``known``: a table stored before for the same model and lengths; a row whose label and
    changed fields it already holds keeps its losses (the same config, weights and text score the same), so
    only new rows are scored."""
    if not origin.lm:
        raise ConfigError(
            "model", origin.name, "a causal language model (a bundle trained on text, a checkpoint with a tokenizer)"
        )
    trained = origin.trained_length
    lengths = lengths or (trained, 4 * trained)
    data = heldout_ids(origin)
    full_cache = frontier.cache_per_token(origin.config, lengths)
    same = known is not None and known.get("lengths") == list(lengths) and known.get("scored_tokens") == len(data)
    before = {(r["label"], tuple(r["changed"])): r for r in known["rows"]} if same else {}
    out = []
    for label, cfg in rows_for(origin):
        if only is not None and label not in only:
            continue
        model = eval_model(
            cfg, weights_for(cfg, origin.name) if origin.kind == "checkpoint" else weights_for(cfg, bundle=origin.name)
        )
        row = {"label": label, "changed": list(surgery.changed_fields(origin.config, cfg)), "loss": {}}
        fam = frontier.family(origin.config, cfg, label)
        if fam is not None and (fam == "as trained" or frontier.cache_per_token(cfg, lengths) != full_cache):
            row["family"], row["cache_bytes_per_token"] = fam, frontier.cache_per_token(cfg, lengths)
        old = before.get((label, tuple(row["changed"])))
        if old is not None and all(str(L) in old["loss"] for L in lengths):
            row["loss"] = {str(L): old["loss"][str(L)] for L in lengths}
            row.update({"errors": old["errors"]} if "errors" in old else {})
            out.append(row)
            continue
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
    as_trained = eval_model(
        origin.config,
        weights_for(origin.config, origin.name)
        if origin.kind == "checkpoint"
        else weights_for(origin.config, bundle=origin.name),
    )
    latent_rows = [] if only is not None else latent.latent_rows(as_trained, origin.config, data, lengths)
    if log and latent_rows:
        log("latent rows: " + ", ".join(f"{r['label']} {r['loss']}" for r in latent_rows))
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
        "latent": latent_rows,  # the K/V latent ranks (latent.py): weights changed, not the config
        "scoring": f"the first {HELDOUT_BYTES} bytes of the held-out split ({len(data)} tokens) cut into windows "
        "of each length; every position but the first of each window scored; windowed patterns "
        f"keep {origin.window} keys",
    }


def write_table(origin: Origin, log=None, update: bool = False) -> dict:
    """Compute and store ``origin``'s table; ``update``: keep the losses of the rows the stored one holds."""
    path = table_path(origin)
    if path is None:
        raise ConfigError(
            "checkpoint", origin.name, f"a checkpoint folder this host offers: {sorted(checkpoints.offered())}"
        )
    known = None
    if update and path.is_file():
        try:
            known = json.loads(path.read_text())
        except ValueError:
            known = None
    result = table(origin, log=log, known=known)
    path.write_text(json.dumps(result, indent=1) + "\n")
    return result
