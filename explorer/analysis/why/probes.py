"""Fixed probe texts, and what each head's attention does on them: the evidence behind a grounded head label.

The per-text labels (``explorer.analysis.maps.heads``) read the attention on whatever text is in the box. These
read it on texts fixed once for every model, each chosen so that a role has one explanation there:

- ``repeat``: ``REPEAT_BATCH`` sequences per copy distance ``D`` in ``LABEL_DISTANCES``: a string ``A`` of
  ``COPY_LEN`` random tokens, random filler up to distance ``D``, ``A`` again, random filler up to
  ``REPEAT_LENGTH`` tokens. The tokens are random (for a byte-level model the printable ASCII bytes but the
  space), so the second copy can be predicted only by copying, and a head reading a fixed offset lines up
  with the earlier occurrence at one distance only.
- ``natural``: the first ``NATURAL_WINDOWS`` windows of the held-out passage at the trained length (prose and
  code of the documentation, no byte of it trained on).
- ``periodic``: ``"10, "`` written over and over: every earlier occurrence of a token sits a multiple of the
  period back, so a head that reads a fixed offset and an induction head read the same keys. It is the case
  where reading roles off one text fails, kept as the control.
- ``distance_probe(D)``: for the copy curve, ``COPY_LEN`` random tokens, filler, and the same tokens at
  distance ``D`` (``curve_distances``: those of ``CURVE`` whose second copy ends within the trained length).

``probe_scores(model, probes)`` gives per head (layers x heads):

- ``induction`` (prefix matching, on ``repeat``): for each query ``p`` of a second copy, the attention summed
  over every key ``j + 1 < p`` whose token ``j`` is the query's (the next token of every earlier occurrence),
  averaged over those rows;
- ``previous-token``, ``first-token``, ``delimiter``, ``local``, ``broad``: the per-text scores
  (``heads.scores``) on each ``natural`` window, averaged;
- ``periodic``: the same prefix-matching weight on ``periodic`` (high for a head that reads one offset: what
  a rule reading this text alone would call induction).

The random draws are seeded (``SEED``), so every model reads the same tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from explorer.analysis.maps.heads import LABELS
from explorer.analysis.maps.heads import scores as text_scores

SEED = 0
COPY_LEN = 16  # tokens per copy
LABEL_DISTANCES = (16, 24, 32)  # copy distances of the label probe (within the distances trained on)
REPEAT_LENGTH = 48  # tokens per label-probe sequence (the farthest second copy ends here)
REPEAT_BATCH = 8  # sequences per distance
CURVE_BATCH = 32  # sequences per distance of the copy curve (480 second-copy predictions)
NATURAL_WINDOWS = 8  # windows of the held-out passage
PERIODIC = b"10, " * 32  # the periodic control (128 bytes)
CURVE = (16, 24, 32, 40, 48, 64, 80, 96, 112, 160, 224)  # the copy curve's distances (those that fit)
PRINTABLE = bytes(range(33, 127))  # the alphabet of a byte-level model's random probes (no space: it is common)


@dataclass(frozen=True)
class Probes:
    """The probe texts as one model's tokens (``(B, L)`` long tensors)."""

    repeat: torch.Tensor  # (len(LABEL_DISTANCES) * REPEAT_BATCH, REPEAT_LENGTH)
    distances: tuple  # the copy distance of each ``repeat`` row
    natural: torch.Tensor  # (NATURAL_WINDOWS, trained length)
    periodic: torch.Tensor  # (1, len)
    alphabet: tuple  # the token ids random probes draw from
    trained_length: int

    def to(self, device) -> Probes:
        """The same probes with their tensors on ``device``."""
        return Probes(
            self.repeat.to(device),
            self.distances,
            self.natural.to(device),
            self.periodic.to(device),
            self.alphabet,
            self.trained_length,
        )

    def second_copy(self, row: int) -> range:
        """Query positions of ``repeat`` row ``row``'s second copy."""
        d = self.distances[row]
        return range(d, d + COPY_LEN)


def alphabet_of(encode, natural_ids: list) -> tuple:
    """The tokens random probes draw from: the printable bytes as ``encode`` reads them when each is one
    token, else the ``len(PRINTABLE)`` most frequent tokens of the natural text (a large vocabulary)."""
    one = [encode(bytes([b])) for b in PRINTABLE]
    if all(len(t) == 1 for t in one):
        return tuple(sorted({t[0] for t in one}))
    values, counts = np.unique(np.asarray(natural_ids), return_counts=True)
    return tuple(sorted(int(v) for v in values[np.argsort(-counts, kind="stable")][: len(PRINTABLE)]))


def _random(alphabet: tuple, shape: tuple, gen: torch.Generator) -> torch.Tensor:
    pick = torch.randint(0, len(alphabet), shape, generator=gen)
    return torch.tensor(alphabet, dtype=torch.long)[pick]


def copies(alphabet: tuple, distance: int, length: int, batch: int, seed: int) -> torch.Tensor:
    """``(batch, length)``: ``COPY_LEN`` random tokens, random filler, the same tokens from ``distance`` on,
    random filler after them."""
    gen = torch.Generator().manual_seed(seed)
    x = _random(alphabet, (batch, length), gen)
    x[:, distance : distance + COPY_LEN] = x[:, :COPY_LEN]
    return x


def curve_distances(trained_length: int) -> tuple:
    """The distances of ``CURVE`` at which the second copy still ends within the trained length."""
    return tuple(d for d in CURVE if d + COPY_LEN <= trained_length)


def distance_probe(probes: Probes, distance: int) -> torch.Tensor:
    """The copy curve's sequences at ``distance`` (``(CURVE_BATCH, distance + COPY_LEN)``)."""
    return copies(probes.alphabet, distance, distance + COPY_LEN, CURVE_BATCH, SEED + 1000 + distance)


def make_probes(encode, natural: bytes, trained_length: int) -> Probes:
    """The probe texts as the tokens of a model whose tokenizer is ``encode`` (bytes -> ids), trained at
    ``trained_length`` tokens; ``natural``: the held-out passage."""
    nat = encode(natural)
    alphabet = alphabet_of(encode, nat)
    n = min(NATURAL_WINDOWS, len(nat) // trained_length)
    rows = [copies(alphabet, d, REPEAT_LENGTH, REPEAT_BATCH, SEED + d) for d in LABEL_DISTANCES]
    dists = tuple(d for d in LABEL_DISTANCES for _ in range(REPEAT_BATCH))
    natural_ids = torch.tensor(nat[: n * trained_length], dtype=torch.long).view(n, trained_length)
    periodic = torch.tensor([encode(PERIODIC)], dtype=torch.long)
    return Probes(torch.cat(rows), dists, natural_ids, periodic, alphabet, trained_length)


def earlier_next(ids: list, queries) -> dict:
    """``{p: [j + 1, ...]}``: for each query ``p``, the key after every earlier occurrence ``j`` of its token
    (``j + 1 < p``, so the query's own key never counts)."""
    seen, out = {}, {}
    for p, t in enumerate(ids):
        if p in queries:
            out[p] = [j + 1 for j in seen.get(t, ()) if j + 1 < p]
        seen.setdefault(t, []).append(p)
    return out


def prefix_matching(att: np.ndarray, ids: list, queries) -> float:
    """Mean over ``queries`` (with at least one earlier occurrence) of the attention ``att (L, L)`` puts on
    the next token of every earlier occurrence of the query's token, summed."""
    targets = {p: js for p, js in earlier_next(ids, set(queries)).items() if js}
    if not targets:
        return float("nan")
    return float(np.mean([att[p, js].sum() for p, js in targets.items()]))


def attentions(model, ids: torch.Tensor) -> np.ndarray:
    """``(n_layers, B, h, L, L)`` float64 maps of ``model`` on ``ids``."""
    with torch.no_grad():
        att = model(ids, return_attention=True).attentions
    return np.stack([a.double().cpu().numpy() for a in att])


def probe_scores(model, probes: Probes) -> dict:
    """``{score name: (n_layers, n_heads) array}`` (see the module docstring)."""
    rep, nat, per = (attentions(model, x) for x in (probes.repeat, probes.natural, probes.periodic))
    n_layers, _, n_heads = rep.shape[:3]
    out = {
        k: np.full((n_layers, n_heads), np.nan) for k in ("induction",) + LABELS[2:] + ("previous-token", "periodic")
    }
    rep_ids = probes.repeat.tolist()
    per_ids = probes.periodic[0].tolist()
    nat_ids = probes.natural.tolist()
    for layer in range(n_layers):
        for h in range(n_heads):
            out["induction"][layer, h] = np.nanmean(
                [prefix_matching(rep[layer, b, h], rep_ids[b], probes.second_copy(b)) for b in range(len(rep_ids))]
            )
            out["periodic"][layer, h] = prefix_matching(per[layer, 0, h], per_ids, range(len(per_ids)))
            per_window = [text_scores(nat[layer, b, h], nat_ids[b]) for b in range(len(nat_ids))]
            for k in ("previous-token",) + LABELS[2:]:
                out[k][layer, h] = np.nanmean([s[k] for s in per_window])
    return out
