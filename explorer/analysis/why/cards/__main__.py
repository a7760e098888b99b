"""``python -m explorer.analysis.why.cards [NAME ...] [--write] [--json]``: the circuit cards of the shipped models
(every bundle and every checkpoint under assets/checkpoints by default), printed as a Markdown table (or
JSON) and, with ``--write``, stored beside each model where ``load_cards`` reads them."""

from __future__ import annotations

import argparse
import json
import sys
import time

from explorer.analysis.why.cards.stored import fresh_card, origin_named, shipped, write_card
from explorer.analysis.why.cards.table import cards_table_md
from explorer.runtime.device import configure_threads
from models import ConfigError


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m explorer.analysis.why.cards", description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"models (default: every shipped one, {shipped()})")
    ap.add_argument("--write", action="store_true", help="store each card beside its model")
    ap.add_argument("--json", action="store_true", help="print the cards as JSON")
    args = ap.parse_args(argv)
    log = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    threads = configure_threads()
    cards, t0 = [], time.perf_counter()
    try:
        for name in args.names or shipped():
            origin = origin_named(name)
            cards.append(write_card(origin, log) if args.write else fresh_card(origin, log))
    except ConfigError as e:
        ap.error(str(e))
    log(f"{len(cards)} cards in {time.perf_counter() - t0:.1f} s ({threads} thread(s))")
    print(json.dumps(cards, indent=1) if args.json else cards_table_md(cards))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
