"""The head classifier on constructed maps: each behaviour, built by hand as the map a head doing only
that would produce, gets its label and a score equal to the weight put where the rule looks (induction: less
the head's weight at the same distances elsewhere, recomputed here in plain loops); a uniform head is broad;
a map that mixes several weakly is mixed; memory slots shift the keys; a head reading a fixed offset is not
induction on periodic text, and a layer-0 head never is."""

import numpy as np
import pytest

from explorer.analysis.maps.heads import LABELS, THRESHOLDS, classify_head, classify_heads, induction_targets

TEXT = b"the cat sat on the mat; the cat sat on the hat."
IDS = list(TEXT)
L = len(IDS)


def causal_uniform(L, Lk=None):
    Lk = Lk or L
    off = Lk - L
    a = np.zeros((L, Lk))
    for p in range(L):
        a[p, : p + off + 1] = 1.0 / (p + off + 1)
    return a


def mix(target_of, weight=0.9):
    """``weight`` on the key ``target_of(p)`` names (None: no target), the rest spread uniformly over the
    row's visible keys."""
    a = causal_uniform(L) * (1 - weight)
    for p in range(L):
        t = target_of(p)
        if t is None:
            a[p] = causal_uniform(L)[p]
        else:
            a[p, t] += weight
    return a


def test_previous_token():
    lab = classify_head(mix(lambda p: p - 1 if p else None), IDS)
    assert lab.label == "previous-token" and lab.score > 0.9
    assert lab.sentence().startswith("On this text, a previous-token head")  # the per-text reading says so


def spread(targets: dict, weight=0.9, n=L):
    """``weight`` split over each row's targets (rows without: uniform over the visible keys)."""
    a = causal_uniform(n) * (1 - weight)
    for p in range(n):
        if p in targets:
            a[p, targets[p]] += weight / len(targets[p])
        else:
            a[p] = causal_uniform(n)[p]
    return a


def plain_induction(a, ids):
    """The induction score recomputed in plain loops from its definition (module docstring of heads.py)."""
    targets = induction_targets(ids)
    others = [p for p in range(len(ids)) if p not in targets]
    judged = []
    for p, js in targets.items():
        total, ok = 0.0, True
        for j in js:
            k = p - j
            at_k = [a[q, q - k] for q in others if q - k >= 0]
            ok = ok and len(at_k) >= 3
            total += a[p, j] - (sum(at_k) / len(at_k) if at_k else 0.0)
        if ok:
            judged.append(total)
    return sum(judged) / len(judged)


def test_induction_on_a_repeated_phrase():
    targets = induction_targets(IDS)
    assert targets  # "the cat sat on the" repeats
    a = spread(targets)
    lab = classify_head(a, IDS, layer=1)
    assert lab.label == "induction"
    assert lab.score == pytest.approx(plain_induction(a, IDS), abs=1e-4)


def test_induction_targets_by_hand_count_every_earlier_occurrence():
    assert induction_targets(list(b"abxab")) == {4: [2]}  # "ab" at 0-1 recurs at 3-4: query 4 reads key 2
    assert induction_targets(list(b"abxabyab")) == {4: [2], 7: [2, 5]}  # both earlier "ab"s' next bytes


def test_a_layer_zero_head_is_never_induction():
    a = spread(induction_targets(IDS))
    assert classify_head(a, IDS, layer=1).label == "induction"
    lab = classify_head(a, IDS, layer=0)
    assert lab.label != "induction" and np.isnan(lab.scores["induction"])
    grid = classify_heads(np.stack([a[None], a[None]]), IDS)  # map 0 is the first attention layer
    assert grid[0][0].label != "induction" and grid[1][0].label == "induction"


def offset_head(n, k):
    """A positional head: all its weight ``k`` keys back (uniform while the row cannot reach that far)."""
    a = causal_uniform(n)
    for p in range(k, n):
        a[p] = 0.0
        a[p, p - k] = 1.0
    return a


def test_a_fixed_offset_head_on_periodic_text_is_not_induction():
    ids = list(b"10, " * 12)
    a = offset_head(len(ids), 3)  # reads the key after the previous period's copy of the query's bigram
    old = np.mean([a[p, js[-1]] for p, js in induction_targets(ids).items()])
    assert old == pytest.approx(1.0)  # the latest occurrence's next byte, which the old rule counted
    assert classify_head(a, ids, layer=1).label != "induction"
    # with a prefix of text that repeats nothing, the fixed offset is seen on rows without a repeat: score ~0,
    # while a head that follows the repeats (uniform elsewhere) is induction
    ids = list(b"Quick zephyrs blow, vexing daft Jim. ") + ids
    lab = classify_head(offset_head(len(ids), 3), ids, layer=1)
    assert lab.label != "induction" and abs(lab.scores["induction"]) < 0.1
    follow = spread(induction_targets(ids), n=len(ids))
    assert classify_head(follow, ids, layer=1).label == "induction"


def test_first_token_sink():
    lab = classify_head(mix(lambda p: 0 if p else None), IDS)
    assert lab.label == "first-token" and lab.score > 0.9


def test_delimiter():
    delims = [j for j, t in enumerate(IDS) if chr(t) in " ;."]

    def target(p):
        earlier = [j for j in delims if j <= p]
        return earlier[-1] if earlier else None

    lab = classify_head(mix(target), IDS)
    assert lab.label == "delimiter" and lab.score > 0.8


def test_local_band_without_a_single_previous_token():
    a = np.zeros((L, L))
    for p in range(L):
        lo = max(0, p - 3)
        a[p, lo : p + 1] = 1.0 / (p + 1 - lo)
    lab = classify_head(a, IDS)
    assert lab.label == "local" and lab.score == pytest.approx(1.0)


def test_uniform_is_broad():
    lab = classify_head(causal_uniform(L), IDS)
    assert lab.label == "broad" and lab.score > 0.99


def test_a_weak_mixture_is_mixed_and_says_its_closest_behaviour():
    a = (
        0.4 * causal_uniform(L)
        + 0.3 * mix(lambda p: p - 1 if p else None, 1.0)
        + 0.3 * mix(lambda p: 0 if p else None, 1.0)
    )
    lab = classify_head(a, IDS)
    assert lab.label == "mixed" and "closest" in lab.sentence()
    assert all(lab.scores[k] < THRESHOLDS[k] for k in LABELS if np.isfinite(lab.scores[k]))


def test_memory_slots_shift_the_keys():
    M = 4
    a = np.zeros((L, L + M))
    for p in range(L):
        a[p, M + max(0, p - 1)] = 1.0  # the previous token, after the memory slots
    lab = classify_head(a, IDS, [0] * M + IDS)
    assert lab.label == "previous-token" and lab.score > 0.95


def test_empty_rows_are_skipped_and_a_layer_without_maps_is_mixed():
    a = mix(lambda p: p - 1 if p else None)
    a[5:10] = np.nan
    assert classify_head(a, IDS).label == "previous-token"
    grid = classify_heads(np.full((1, 2, L, L), np.nan), IDS)
    assert [h.label for h in grid[0]] == ["mixed", "mixed"]


@pytest.mark.parametrize("bundle", ["moe", "alibi"])
def test_periodic_text_gives_no_induction_label_on_trained_weights(bundle):
    """Under the old rule (latest occurrence only, no distance correction, any layer) "abab..." made the MoE's
    layer-0 head 0 and ALiBi's heads 1.0 and 2.0 induction heads: positional heads lining up with the period."""
    import torch

    from explorer.analysis.weights import bundled

    ids = list(b"ab" * 15)
    with torch.no_grad():
        att = bundled.load(bundle).model()(torch.tensor([ids]), return_attention=True).attentions
    maps = np.stack([a[0].numpy() for a in att])
    old = [
        (n, k)
        for n in range(maps.shape[0])
        for k in range(maps.shape[1])
        if np.mean([maps[n, k, p, js[-1]] for p, js in induction_targets(ids).items()]) >= THRESHOLDS["induction"]
    ]
    assert old  # what the old rule read off this text
    assert all(h.label != "induction" for row in classify_heads(maps, ids) for h in row)
