"""``python -m explorer.reproduce NAME [--json out.json] [--quick] [--threads N] [--store]``: one
reproduction of the source texts' results (``explorer.training.reproductions``), its table printed and
its result written as JSON. ``--quick`` shrinks every setting (seconds, for checking the plumbing); the
effect is only expected at the default settings. ``--store`` keeps the run as the one the Train tab shows
at once (``assets/reproductions/NAME.json``, ``explorer.training.reproductions.stored``); NAME ``all``
runs every reproduction.
"""

from __future__ import annotations

import argparse
import json
import sys

from explorer.training.reproductions import REPRODUCTIONS, run, stored
from kernels.tools.busy import BusyWatch


def format_table(rows: list, columns: list) -> str:
    """A plain-text table of ``rows`` (dicts) in ``columns`` order; floats with 4 significant digits."""

    def cell(v):
        if isinstance(v, float):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    body = [[cell(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[k]) for b in body)) if body else len(c) for k, c in enumerate(columns)]
    line = lambda vals: "  ".join(v.rjust(w) for v, w in zip(vals, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(b) for b in body)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m explorer.reproduce", description="Reproduce a result of the source texts on this machine."
    )
    parser.add_argument("name", choices=[*REPRODUCTIONS, "all"])
    parser.add_argument("--json", help="write the result to this file")
    parser.add_argument("--quick", action="store_true", help="tiny settings: checks the plumbing, not the effect")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    parser.add_argument("--store", action="store_true", help="store the run for the Train tab (not with --quick)")
    args = parser.parse_args(argv)
    if args.store and args.quick:
        parser.error("--store keeps full runs only: drop --quick")
    names = list(REPRODUCTIONS) if args.name == "all" else [args.name]
    for name in names:
        json_path = args.json if len(names) == 1 or not args.json else f"{args.json.removesuffix('.json')}.{name}.json"
        one(name, args, json_path)
    return 0


def one(name: str, args, json_path: str | None) -> None:
    args.name = name
    with BusyWatch() as watch:
        result = run(
            args.name,
            quick=args.quick,
            threads=args.threads,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    mod = REPRODUCTIONS[args.name]
    print(f"# {args.name}: {mod.TITLE}")
    print("settings: " + json.dumps(result["settings"], sort_keys=True))
    print(format_table(mod.table_rows(result), mod.COLUMNS))
    for line in mod.extra_lines(result):
        print(line)
    print(f"reading: {result['reading']}")
    print(f"wall time: {result['wall_s']:.1f} s on this machine ({args.threads} thread(s))")
    print(watch.note())
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    if args.store:
        print(f"stored: {stored.store(result)}")


if __name__ == "__main__":
    raise SystemExit(main())
