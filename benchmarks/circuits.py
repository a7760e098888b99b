"""The induction circuit of a bundled model, measured with the interpretability analyses, and what each view
costs on this CPU.

``python -m benchmarks.circuits [--bundle default] [--batch 32] [--repeats 3]`` prints, for the bundle:
- each head's induction score: over ``--batch`` sequences of 30 random printable bytes written twice (and
  of 30 bytes drawn from all 256, most of which the model never saw in training), the mean
  attention a query in the second copy puts on the key one after the same byte's earlier occurrence;
- the second copy's next-byte loss and accuracy (its first byte, which nothing predicts, left out) plain, with
  the layer-1 heads zeroed and mean-ablated, with layer 0 head 1 zeroed, and with layers 2-3 (heads and FFNs)
  zeroed;
- the logit-lens loss per layer on those sequences (second copy);
- the activation-patching grid on the landing text and its corrupted twin (``patching.default_pair``);
- each head's copying scores and the top K-composition pairs of layers 0 -> 1;
- the seconds per view (median of ``--repeats``, one thread as the app runs, after a warm-up), and the
  ``machine:`` line (was anything else running).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from explorer.analysis.weights import bundled
from explorer.analysis.why.attribution import attribute
from explorer.analysis.why.circuits import composition, head_circuits
from explorer.analysis.why.lens import logit_lens
from explorer.analysis.why.patching import ablate, default_pair, head_means, heldout_ids, patch_heads
from explorer.runtime.device import configure_threads
from explorer.runtime.text import DEFAULT_TEXT
from kernels.tools.busy import BusyWatch
from models.interventions import Interventions

N = 30  # bytes per copy


def repeated(batch: int, low: int, high: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(low, high, (batch, N), generator=g)
    return torch.cat([x, x], 1)  # (B, 2N)


def induction_scores(model, ids) -> torch.Tensor:
    """``(n_layers, n_heads)``: mean attention from second-copy position ``i`` to key ``i - N + 1``."""
    with torch.no_grad():
        att = model(ids, return_attention=True).attentions
    q = torch.arange(N, 2 * N - 1)
    return torch.stack([a[:, :, q, q - N + 1].mean((0, 2)) for a in att])


def copy_loss(model, ids, record=None) -> tuple:
    """Loss (nats/byte) and accuracy of the second copy's bytes after its first."""
    with torch.no_grad():
        logits = model(ids, interventions=record).logits[:, N : 2 * N - 1].float()
    target = ids[:, N + 1 :]
    loss = F.cross_entropy(logits.transpose(1, 2), target)
    return float(loss), float((logits.argmax(-1) == target).float().mean())


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", default="default")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    configure_threads()
    model = bundled.load(args.bundle).model()
    cfg = model.cfg
    H, Ln = cfg.n_heads, cfg.n_layers
    with BusyWatch() as busy:
        for name, (lo, hi) in (
            ("random printable bytes 33-126", (33, 127)),
            ("random bytes 0-255 (128-255 are nearly absent from training)", (0, 256)),
        ):
            ids = repeated(args.batch, lo, hi)
            print(f"\n## {args.batch} sequences of {N} {name} written twice")
            print("induction score (attention on the key after the earlier occurrence), layers x heads:")
            for l, row in enumerate(induction_scores(model, ids)):
                print(f"  layer {l}: " + "  ".join(f"{v:.3f}" for v in row.tolist()))
            means = head_means(model, heldout_ids())
            rows = {
                "plain": None,
                "layer-1 heads zeroed": Interventions(replace_heads={(1, h): "zero" for h in range(H)}),
                "layer-1 heads mean-ablated": Interventions(replace_heads={(1, h): means[1, h] for h in range(H)}),
                "layer 0 head 1 zeroed": Interventions(replace_heads={(0, 1): "zero"}),
                "layer 0 heads zeroed": Interventions(replace_heads={(0, h): "zero" for h in range(H)}),
                "layers 2-3 zeroed (heads + FFN)": Interventions(
                    replace_heads={(l, h): "zero" for l in range(2, Ln) for h in range(H)},
                    replace_ffn={l: "zero" for l in range(2, Ln)},
                ),
            }
            print("second copy (after its first byte): loss nats/byte, accuracy")
            for label, record in rows.items():
                loss, acc = copy_loss(model, ids, record)
                print(f"  {label:34s} {loss:6.3f}  {acc:.3f}")
            lens = [logit_lens(model, ids[b : b + 1]) for b in range(min(args.batch, 8))]
            second = [p for p in lens[0].positions if p >= N]
            per_layer = torch.stack([-(l.target_prob[:, second].log()).mean(1) for l in lens]).mean(0)
            print(
                "logit lens, second copy's loss per layer (first 8 sequences): "
                + ", ".join(f"{r} {v:.3f}" for r, v in zip(lens[0].rows, per_layer.tolist()))
            )

        clean, corrupt = default_pair(DEFAULT_TEXT)
        c_ids, x_ids = (torch.tensor([list(t.encode())]) for t in (clean, corrupt))
        p = patch_heads(model, c_ids, x_ids)
        print(f"\n## activation patching on the landing text ({c_ids.shape[1]} bytes), corrupted: {corrupt!r}")
        print(
            f"logit difference clean {p.clean:.3f}, corrupted {p.corrupted:.3f}; checks: everything patched "
            f"{p.everything}, nothing {p.nothing}; fraction restored, layers x heads (+ FFN):"
        )
        for l in range(Ln):
            print(f"  layer {l}: " + "  ".join(f"{v:+.3f}" for v in p.heads[l].tolist()) + f"   FFN {p.ffn[l]:+.3f}")
        a = ablate(model, c_ids, [(1, h) for h in range(H)])
        print(
            f"zeroing layer-1 heads on the landing text: {a.loss:.3f} -> {a.loss_ablated:.3f} nats/byte; "
            f"held-out passage {a.heldout:.3f} -> {a.heldout_ablated:.3f}"
        )

        circ = head_circuits(model)
        print("\n## OV copying scores (printable ASCII + newline): eigenvalue ratio / diagonal-argmax fraction")
        for l in range(Ln):
            print(
                f"  layer {l}: "
                + "  ".join(f"{e:+.3f}/{d:.3f}" for e, d in zip(circ.eigen[l].tolist(), circ.diagonal[l].tolist()))
            )
        for kind in ("K", "Q", "V"):
            comp = composition(model, 0, 1, kind)
            top = ", ".join(f"0.{a}->1.{b} {s:.3f}" for (a, b), s in comp.top(4))
            print(f"{kind}-composition layer 0 -> 1, top pairs: {top} (random baseline {comp.baseline:.3f})")

        print(f"\n## seconds per view (median of {args.repeats:d}, {torch.get_num_threads():d} thread(s))")
        pos = len(DEFAULT_TEXT.encode()) // 2
        views = {
            "logit lens (landing text)": lambda: logit_lens(model, c_ids),
            "attribution (one position)": lambda: attribute(model, c_ids, pos),
            "zero ablation (text + held-out)": lambda: ablate(model, c_ids, [(1, 0)]),
            "patching grid (heads + FFNs)": lambda: patch_heads(model, c_ids, x_ids),
            "head circuits (OV, QK, copying)": lambda: head_circuits(model),
            "K-composition 0 -> 1": lambda: composition(model, 0, 1, "K"),
        }
        for label, fn in views.items():
            print(f"  {label:34s} {timed(fn, args.repeats):.3f} s")
    print(busy.note())


if __name__ == "__main__":
    main()
