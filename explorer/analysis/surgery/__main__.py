"""``python -m explorer.analysis.surgery [BUNDLE | --checkpoint ID] [--lengths ...] [--json] [--write [--update]]``:
the Surgery table of a bundled model or of a pretrained checkpoint, printed as Markdown (or JSON) and,
with ``--write``, stored beside the model where the Surgery tab reads it."""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

from explorer.analysis.surgery.origin import bundle_origin, checkpoint_origin
from explorer.analysis.surgery.tabulate import table, write_table
from explorer.analysis.weights import bundled, checkpoints
from models import ConfigError


def markdown(result: dict) -> str:
    ls, t = result["lengths"], result["trained_length"]
    head = [
        f"{result['label']}: held-out loss ({result['unit']}; perplexity in brackets)\n",
        f"| change (same weights; windows of {result['window']} keys) | "
        + " | ".join(
            f"L={L} tokens" + (" (trained)" if L == t else f" ({L / t:g}x past trained)" if L > t else "") for L in ls
        )
        + " |",
        "| --- | " + " | ".join("---" for _ in ls) + " |",
    ]
    for row in result["rows"]:
        cells = [
            "n/a" if row["loss"][str(L)] is None else f"{row['loss'][str(L)]:.3f} ({math.exp(row['loss'][str(L)]):.2f})"
            for L in ls
        ]
        head.append(f"| {row['label']} | " + " | ".join(cells) + " |")
    return "\n".join(head) + f"\n\n{result['scoring']}."


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.analysis.surgery", description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", nargs="?", default="default", help=f"a bundle (one of {bundled.names()})")
    ap.add_argument(
        "--checkpoint",
        default="",
        help=f"a checkpoint id instead of a bundle (offered here: {sorted(checkpoints.offered())})",
    )
    ap.add_argument("--json", action="store_true", help="print the table as JSON")
    ap.add_argument("--lengths", default="", help="comma-separated lengths in tokens (default: trained, 4x trained)")
    ap.add_argument(
        "--write",
        action="store_true",
        help="store it beside the model (<bundle>.surgery.json, or "
        "surgery.json in the checkpoint's folder): the Surgery tab shows it",
    )
    ap.add_argument(
        "--update",
        action="store_true",
        help="with --write: keep the losses of the rows the stored table already holds, score only the new ones",
    )
    args = ap.parse_args(argv)
    lengths = tuple(int(x) for x in args.lengths.split(",") if x.strip()) or None
    if args.write and lengths:
        ap.error("--write stores the table at the trained length and 4x it: leave out --lengths")
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    torch.set_num_threads(max(1, torch.get_num_threads()))
    try:
        origin = checkpoint_origin(args.checkpoint) if args.checkpoint else bundle_origin(args.bundle)
        result = write_table(origin, log, update=args.update) if args.write else table(origin, lengths, log)
    except ConfigError as e:
        ap.error(str(e))
    print(json.dumps(result, indent=1) if args.json else markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
