"""The head classifier on constructed maps: each behaviour, built by hand as the map a head doing only
that would produce, gets its label and a score equal to the weight put where the rule looks; a uniform
head is broad; a map that mixes several weakly is mixed; memory slots shift the keys."""
import numpy as np
import pytest

from explorer.analysis.heads import LABELS, THRESHOLDS, classify_head, classify_heads, induction_targets

TEXT = b"the cat sat on the mat; the cat sat on the hat."
IDS = list(TEXT)
L = len(IDS)


def causal_uniform(L, Lk=None):
    Lk = Lk or L
    off = Lk - L
    a = np.zeros((L, Lk))
    for p in range(L):
        a[p, :p + off + 1] = 1.0 / (p + off + 1)
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


def test_induction_on_a_repeated_phrase():
    targets = induction_targets(IDS)
    assert targets  # "the cat sat on the" repeats
    a = mix(lambda p: targets.get(p, None))
    lab = classify_head(a, IDS)
    assert lab.label == "induction"
    assert lab.score == pytest.approx(np.mean([a[p, j] for p, j in targets.items()]), abs=1e-4)


def test_induction_targets_by_hand():
    ids = list(b"abxab")  # the pair "ab" at 0-1 recurs at 3-4: query 4 reads key 2 ("x")
    assert induction_targets(ids) == {4: 2}


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
        a[p, lo:p + 1] = 1.0 / (p + 1 - lo)
    lab = classify_head(a, IDS)
    assert lab.label == "local" and lab.score == pytest.approx(1.0)


def test_uniform_is_broad():
    lab = classify_head(causal_uniform(L), IDS)
    assert lab.label == "broad" and lab.score > 0.99


def test_a_weak_mixture_is_mixed_and_says_its_closest_behaviour():
    a = 0.4 * causal_uniform(L) + 0.3 * mix(lambda p: p - 1 if p else None, 1.0) + 0.3 * mix(
        lambda p: 0 if p else None, 1.0)
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
