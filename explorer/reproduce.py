"""Reproduce the source texts' claims about trained models, on this machine, in a minute or two.

``python -m explorer.reproduce NAME [--json out.json] [--quick] [--threads N]`` runs one
reproduction, prints its table and writes ``{"name", "settings", "wall_s", "rows": [...]}``
(plus extra top-level keys some reproductions add). The same functions feed the Reproductions
panel of the Train tab. ``--quick`` shrinks every setting (seconds, for checking the plumbing);
the effect is only expected at the default settings.

- ``warmup``: post-LN vs pre-LN, with and without learning-rate warm-up (Xiong et al. 2020).
- ``extrapolation``: train at one length, evaluate longer (ALiBi, Press et al. 2022).
- ``induction``: a two-layer attention-only model learns induction heads (Olsson et al. 2022).
- ``efficiency``: every attention of the catalogue, quality vs throughput vs memory (Long Range Arena).
- ``kv_heads``: MHA vs GQA vs MQA: KV-cache bytes, decode latency, quality (Shazeer 2019; Ainslie 2023).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable

import torch

from kernels.busy import BusyWatch

from . import repro_efficiency, repro_extrapolation, repro_induction, repro_kv_heads, repro_warmup

REPRODUCTIONS: dict = {
    "warmup": repro_warmup,
    "extrapolation": repro_extrapolation,
    "induction": repro_induction,
    "efficiency": repro_efficiency,
    "kv_heads": repro_kv_heads,
}


def run(name: str, quick: bool = False, threads: int = 1, progress: Callable[[str], None] | None = None) -> dict:
    """Run one reproduction; the result dict of the JSON schema above."""
    from models import ConfigError

    if name not in REPRODUCTIONS:
        raise ConfigError("reproduction", name, f"one of {list(REPRODUCTIONS)}")
    mod = REPRODUCTIONS[name]
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        result = mod.run(quick=quick, threads=threads, progress=progress or (lambda _msg: None))
    finally:
        torch.set_num_threads(old)
    result = {"name": name, **result, "wall_s": round(time.perf_counter() - t0, 2)}
    result["settings"] = {**result["settings"], "threads": threads, "quick": quick}
    result["reading"] = mod.reading(result)
    return result


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
    parser = argparse.ArgumentParser(prog="python -m explorer.reproduce", description=__doc__.split("\n\n")[0])
    parser.add_argument("name", choices=list(REPRODUCTIONS))
    parser.add_argument("--json", help="write the result to this file")
    parser.add_argument("--quick", action="store_true", help="tiny settings: checks the plumbing, not the effect")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads (default 1)")
    args = parser.parse_args(argv)
    with BusyWatch() as watch:
        result = run(args.name, quick=args.quick, threads=args.threads,
                     progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    mod = REPRODUCTIONS[args.name]
    print(f"# {args.name}: {mod.TITLE}")
    print("settings: " + json.dumps(result["settings"], sort_keys=True))
    print(format_table(mod.table_rows(result), mod.COLUMNS))
    for line in mod.extra_lines(result):
        print(line)
    print(f"reading: {result['reading']}")
    print(f"wall time: {result['wall_s']:.1f} s on this machine ({args.threads} thread(s))")
    print(watch.note())
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
