"""What each attention head does on the current text: a label and the score that decided it.

``classify_head(att, ids, key_ids)`` reads one head's map (queries x keys, rows summing to 1; the keys
may start with memory slots, the queries being the last keys) and the byte ids of the queries and keys,
and scores six behaviours, each a mean over the query rows where it is defined:

| label | score | threshold |
| --- | --- | --- |
| previous-token | weight on key ``p - 1`` | 0.4 |
| induction | weight on the keys after every earlier occurrence of the current bigram (query ``p`` whose bytes ``p-1, p`` occurred at ``j-1, j`` before: keys ``j + 1``), less the weight the head puts at the same distances on rows without such an occurrence; over the rows where that comparison exists (at least 3); layer >= 1 only | 0.3 |
| first-token | weight on the first key (the first token: a "sink") | 0.4 |
| delimiter | weight on spaces, newlines and punctuation, when they are at most half of the keys each row sees and the weight is at least 1.5x their share | 0.5 |
| local | weight on keys within 3 positions back (the query itself included) | 0.6 |
| broad | row entropy over the log of the keys the row sees | 0.75 |

A head gets the first label, in the order of the table, whose score reaches its threshold (the
specific behaviours before the generic ones: a previous-token head is also local); none reached is
"mixed". Each threshold is the weight a head that does nothing else would put there and more than the
fraction a uniform head gives (a uniform row over 30 keys puts 0.03 on each).

The induction score subtracts what the head's attention by distance alone predicts, measured on the rows
with no earlier occurrence (at least ``MIN_PROFILE_ROWS`` of them per distance; a target at a distance no
such row reaches is not judged): a head that reads a fixed offset lines up with the earlier occurrences on
periodic text ("10, 10, 10, ...") without matching anything, and scores about 0. A head of the first
attention layer (``layer=0``) is never scored for induction: it sees tokens and positions only, with no
earlier head's output to match against. ``explorer.analysis.why.grounded`` labels heads on fixed probe texts
instead, confirmed by ablation; this module reads the text in the box. Rows the head
leaves empty (NaN, or a zero row of a query with no allowed key) are skipped. With learned attention
sinks (``attn_sinks``) a row sums to ``1 - p_sink``: every score is still the weight on keys, so the
sink's share counts toward no behaviour (a head that parks its attention in the sink scores low
everywhere and is "mixed"); a row is judged whenever it puts any weight on a key.
"""  # noqa: E501 (a Markdown table, one row a line)

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

LABELS = ("previous-token", "induction", "first-token", "delimiter", "local", "broad")
THRESHOLDS = {
    "previous-token": 0.4,
    "induction": 0.3,
    "first-token": 0.4,
    "delimiter": 0.5,
    "local": 0.6,
    "broad": 0.75,
}
DESCRIBE = {
    "previous-token": "reads the token just before the query",
    "induction": "reads the token that followed each earlier occurrence of the current pair of tokens",
    "first-token": "parks its weight on the first token (an attention sink)",
    "delimiter": "reads spaces, newlines and punctuation",
    "local": "reads a short window of the last few tokens",
    "broad": "spreads its weight over many tokens",
    "mixed": "does none of these clearly on this text",
}
RULES_TEXT = (
    "previous-token: weight on key p-1 ≥ 0.4; induction (layer ≥ 1): weight on the keys after every "
    "earlier occurrence of the current pair of tokens, less the head's weight at those distances on "
    "other rows, ≥ 0.3; first-token: weight on the first key ≥ 0.4; delimiter: weight "
    "on spaces and punctuation ≥ 0.5 and ≥ 1.5× their share; local: weight within 3 keys back ≥ 0.6; "
    "broad: row entropy ≥ 0.75 of its maximum; the first rule met, in this order, names the head"
)
LOCAL_SPAN = 3
MIN_INDUCTION_ROWS = 3
MIN_PROFILE_ROWS = 3  # rows without an earlier occurrence that must reach a distance to judge a target there
DELIMITERS = frozenset(b" \t\n.,;:!?()[]{}'\"-")


@dataclass(frozen=True)
class HeadLabel:
    label: str  # one of LABELS or "mixed"
    score: float  # the score that decided it (the best score for "mixed")
    scores: dict = field(default_factory=dict)  # every behaviour's score (NaN: undefined on this text)

    def short(self) -> str:
        """ "induction 0.71": what a grid panel shows."""
        return f"{self.label} {self.score:.2f}" if self.label != "mixed" else "mixed"

    def sentence(self) -> str:
        """What the zoomed head says in words."""
        if self.label == "mixed":
            best = max(
                ((k, v) for k, v in self.scores.items() if np.isfinite(v)),
                key=lambda kv: kv[1] / THRESHOLDS[kv[0]],
                default=None,
            )
            near = f" (closest: {best[0]} {best[1]:.2f}, threshold {THRESHOLDS[best[0]]})" if best else ""
            return f"This head {DESCRIBE['mixed']}{near}."
        article = "an" if self.label[0] in "aeiou" else "a"
        return (
            f"On this text, {article} {self.label} head: it {DESCRIBE[self.label]} (score {self.score:.2f}, threshold "
            f"{THRESHOLDS[self.label]})."
        )


def _rows(att: np.ndarray) -> np.ndarray:
    """Indices of the query rows the head filled (finite, with weight on its keys: about one, or less
    with a learned sink)."""
    s = np.nan_to_num(att, nan=0.0).sum(-1)
    return np.nonzero(np.isfinite(att).all(-1) & (s > 1e-6))[0]


def induction_targets(ids: list) -> dict:
    """``{p: [j + 1, ...]}`` for each query ``p`` whose bigram ``(ids[p-1], ids[p])`` occurred earlier ending
    at ``j`` (every such ``j`` with ``j + 1 < p``, oldest first)."""
    seen, out = {}, {}
    for p in range(1, len(ids)):
        pair = (ids[p - 1], ids[p])
        js = [j + 1 for j in seen.get(pair, ()) if j + 1 < p]
        if js:
            out[p] = js
        seen.setdefault(pair, []).append(p)
    return out


def induction_score(att: np.ndarray, ids: list, rows: np.ndarray, offset: int = 0) -> float:
    """The induction score of one head (module docstring): weight on the targets of ``induction_targets``
    less what the head puts at the same distances on rows without targets; NaN with fewer than
    ``MIN_INDUCTION_ROWS`` rows judged. ``rows``: the filled query rows; ``offset``: memory slots before the keys."""
    filled = set(rows.tolist())
    targets = {p: js for p, js in induction_targets(list(ids)).items() if p in filled}
    if len(targets) < MIN_INDUCTION_ROWS:
        return float("nan")
    Lk = att.shape[1]
    other = np.array([p for p in rows.tolist() if p not in targets], dtype=int)
    dist = (other[:, None] + offset) - np.arange(Lk)[None, :]  # (rows, Lk): query key minus key
    ok = dist >= 0
    counts = np.bincount(dist[ok], minlength=Lk + offset) if other.size else np.zeros(Lk + offset)
    sums = np.bincount(dist[ok], weights=att[other][ok], minlength=Lk + offset) if other.size else counts
    judged = []
    for p, js in targets.items():
        d = [p - j for j in js]
        if all(counts[k] >= MIN_PROFILE_ROWS for k in d):
            judged.append(sum(att[p, j + offset] - sums[k] / counts[k] for j, k in zip(js, d)))
    return float(np.mean(judged)) if len(judged) >= MIN_INDUCTION_ROWS else float("nan")


def scores(att: np.ndarray, ids: list, key_ids: list | None = None, layer: int | None = None) -> dict:
    """Every behaviour's score of one head (see the module docstring); NaN where undefined (induction: at
    ``layer`` 0)."""
    att = np.asarray(att, dtype=np.float64)
    L, Lk = att.shape
    key_ids = list(ids) if key_ids is None else list(key_ids)
    offset = Lk - L  # memory slots come first: query p sits at key p + offset
    rows = _rows(att)
    out = {k: float("nan") for k in LABELS}
    if rows.size == 0:
        return out
    q = rows[rows + offset >= 1]  # rows with a previous key
    if q.size:
        out["previous-token"] = float(att[q, q + offset - 1].mean())
    if layer != 0:
        out["induction"] = induction_score(att, ids, rows, offset)
    first = offset  # the first token's key (after the memory slots)
    q = rows[rows > 0]
    if q.size:
        out["first-token"] = float(att[q, first].mean())
    # the rest row by row, as whole arrays (a pretrained model has 270 heads of 256 rows)
    a = att[rows]  # (rows, Lk)
    seen = a > 0
    n_seen = seen.sum(1)
    delim = np.array([k in DELIMITERS for k in key_ids], dtype=bool)
    if delim.any():
        mass = float(a[:, delim].sum(1).mean())
        share = float(((seen & delim).sum(1) / np.maximum(1, n_seen)).mean())
        out["delimiter"] = mass if share <= 0.5 and mass >= 1.5 * share else 0.0
    k = np.arange(Lk)[None, :]
    at = rows[:, None] + offset  # each query's own key
    out["local"] = float((a * ((k >= at - LOCAL_SPAN) & (k <= at))).sum(1).mean())
    many = n_seen > 1
    if many.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            plogp = np.where(seen, a * np.log(np.where(seen, a, 1.0)), 0.0).sum(1)
        out["broad"] = float((-plogp[many] / np.log(n_seen[many])).mean())
    return out


def classify_head(att: np.ndarray, ids: list, key_ids: list | None = None, layer: int | None = None) -> HeadLabel:
    """The head's label (see the module docstring); ``layer``: its attention layer (0: never induction)."""
    s = scores(att, ids, key_ids, layer)
    for label in LABELS:
        if np.isfinite(s[label]) and s[label] >= THRESHOLDS[label]:
            return HeadLabel(label, round(s[label], 4), s)
    finite = [v for v in s.values() if np.isfinite(v)]
    return HeadLabel("mixed", round(max(finite), 4) if finite else float("nan"), s)


def classify_heads(attention: np.ndarray, ids: list, key_ids: list | None = None) -> list:
    """``[[HeadLabel per head] per layer]`` of an ``(n_layers, h, L, Lk)`` array (map ``n`` is attention layer
    ``n``: the first is never induction; a layer with no maps: every head "mixed" with NaN scores)."""
    return [
        [classify_head(attention[n, k], ids, key_ids, n) for k in range(attention.shape[1])]
        for n in range(attention.shape[0])
    ]
