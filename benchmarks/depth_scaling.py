"""Xiong et al. 2020's Theorem 1 as the Gradients tab measures it, and what the measurement costs.

``python -m benchmarks.depth_scaling [--preset NAME] [--seeds 2] [--json out.json]`` runs
``explorer.analysis.gradients.depth_scaling.depth_scaling`` on a preset's config (default: the catalogue's default,
whose pre-LN and post-LN variants have trained bundles) cold (nothing memoised), with the app's thread
count (``EXPLORER_THREADS``), and prints the last layer's FFN output gradient norm per depth and norm
placement, each placement's log-log slope and its ratio deepest / shallowest against 1/sqrt(L)'s, the
trained bundles' points, the seconds it took, and the ``machine:`` line (was anything else running).
"""

from __future__ import annotations

import argparse
import json
import math
import time

import torch

from explorer.analysis.common.memo import clear_caches
from explorer.analysis.gradients.depth_scaling import DEPTHS, SEEDS, depth_scaling
from explorer.analysis.weights.bundled import bundled_weights
from explorer.runtime.device import configure_threads
from explorer.runtime.presets import preset_config
from kernels.tools.busy import BusyWatch
from models import ModelConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default=None, help="a preset's name (default: ModelConfig())")
    parser.add_argument("--seeds", type=int, default=SEEDS)
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args()
    configure_threads()
    cfg = preset_config(args.preset) if args.preset else ModelConfig()
    clear_caches()
    with BusyWatch() as busy:
        t0 = time.perf_counter()
        result = depth_scaling(cfg, bundled_weights(cfg), seeds=args.seeds)
        seconds = time.perf_counter() - t0
    depths = result["depths"]
    print(
        f"‖∇W2‖ of {result['parameter']}, {result['loss']} ({result['batch']} x {result['seq_len']}), "
        f"{result['init']}, mean of {result['seeds']} seeds, d_model {result['d_model']}"
    )
    print("| placement | " + " | ".join(f"L={d}" for d in depths) + " | slope | deepest / shallowest |")
    print("| --- |" + " ---: |" * (len(depths) + 2))
    for p, r in result["placements"].items():
        a, b = r["last"][0], r["last"][-1]
        ratio = f"{b / a:.3g}" if a and b else "-"
        slope = "-" if r["slope"] is None else f"{r['slope']:+.2f}"
        print(f"| {p} | " + " | ".join("-" if v is None else f"{v:.3g}" for v in r["last"]) + f" | {slope} | {ratio} |")
    print(f"\n1/sqrt(L) from L={depths[0]} to L={depths[-1]}: x{math.sqrt(depths[0] / depths[-1]):.3f}")
    for p, t in result["trained"].items():
        print(f"trained {p} ({t['label']}, {t['depth']} layers): {t['last']:.3g}")
    print(
        f"\n{len(result['placements'])} placements x {len(DEPTHS)} depths x {result['seeds']} seeds, cold: "
        f"{seconds:.1f} s; threads: {torch.get_num_threads()}; {busy.note()}"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**result, "seconds": seconds}, f, indent=1)


if __name__ == "__main__":
    main()
