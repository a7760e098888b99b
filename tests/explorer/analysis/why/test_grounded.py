"""Grounded head labels: the mean-ablation effect against a plain forward with the head's mean write put in by
hand; the prefix-matching score against its definition on a hand-built map; the default bundle's known
circuit (layer-1 induction heads, confirmed by ablation; no layer-0 head is induction)."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from plain_forward import PLAIN, perturbed, plain_run

from explorer.analysis.surgery.loss import heldout_text
from explorer.analysis.weights import bundled
from explorer.analysis.why.grounded import MIN_EFFECT, GroundedLabel, ablation_effects, grounded_labels, probe_label
from explorer.analysis.why.probes import COPY_LEN, REPEAT_LENGTH, Probes, make_probes, prefix_matching

V = PLAIN["vocab_size"]


def small_probes():
    return make_probes(lambda b: [x % V for x in b], heldout_text()[:1024], 32)


def test_probes_are_fixed_and_the_second_copy_repeats_the_first():
    a, b = small_probes(), small_probes()
    assert torch.equal(a.repeat, b.repeat) and torch.equal(a.natural, b.natural)
    assert a.repeat.shape[1] == REPEAT_LENGTH and a.natural.shape == (8, 32)
    for row, d in enumerate(a.distances):
        assert torch.equal(a.repeat[row, d : d + COPY_LEN], a.repeat[row, :COPY_LEN])


def test_prefix_matching_counts_every_earlier_occurrence():
    ids = [5, 6, 7, 5, 8, 5]  # query 5 ("5"): earlier 5s at 0 and 3, their next tokens at keys 1 and 4
    att = np.zeros((6, 6))
    att[5, 1], att[5, 4], att[5, 5] = 0.3, 0.5, 0.2
    att[3, 1], att[3, 3] = 0.6, 0.4
    assert prefix_matching(att, ids, [5]) == pytest.approx(0.8)
    assert prefix_matching(att, ids, [3, 5]) == pytest.approx((0.6 + 0.8) / 2)
    assert np.isnan(prefix_matching(att, ids, [1, 2]))  # no earlier occurrence: undefined


def test_probe_label_needs_layer_one_for_induction():
    s = {"previous-token": 0.1, "induction": 0.9, "first-token": 0.0, "delimiter": 0.0, "local": 0.7, "broad": 0.2}
    assert probe_label(s, 1) == ("induction", 0.9)
    assert probe_label(s, 0) == ("local", 0.7)


def plain_loss(model, ids, positions, patch=None):
    """Mean next-token loss of a plain forward, row by row, over ``positions[row]`` (query positions)."""
    total = []
    for row in range(ids.shape[0]):
        logits = plain_run(model, ids[row : row + 1], patch)["logits"]
        loss = F.cross_entropy(logits[:-1], ids[row, 1:], reduction="none")
        total.append(loss[positions[row]])
    return float(torch.cat(total).mean())


def test_mean_ablation_effect_equals_a_plain_recomputation():
    model, full = perturbed(), small_probes()
    rows = [0, 9, 18]  # one sequence per copy distance, two natural windows: a short plain loop
    probes = Probes(
        full.repeat[rows],
        tuple(full.distances[r] for r in rows),
        full.natural[:2],
        full.periodic,
        full.alphabet,
        full.trained_length,
    )
    assert len(set(probes.distances)) == 3
    base, effects, _ = ablation_effects(model, probes)
    n = probes.natural.shape[1]
    copy_pos = [torch.arange(d, d + COPY_LEN - 1) for d in probes.distances]
    nat_pos = [torch.arange(n - 1)] * probes.natural.shape[0]
    for which, ids, pos in (("copy", probes.repeat, copy_pos), ("natural", probes.natural, nat_pos)):
        ref0 = plain_loss(model, ids, pos)
        assert base[which] == pytest.approx(ref0, abs=1e-4)
        for layer, head in ((0, 1), (1, 3)):
            writes = torch.cat([plain_run(model, ids[r : r + 1])["heads"][layer][head] for r in range(len(ids))])
            mean = writes.mean(0)  # the head's write averaged over every position of the probe
            patched = plain_loss(model, ids, pos, {(layer, head): mean.expand(ids.shape[1], -1)})
            assert effects[which][layer, head] == pytest.approx(patched - ref0, abs=1e-4)


@pytest.fixture(scope="module")
def default_grounded():
    from explorer.analysis.surgery import bundle_origin

    origin = bundle_origin("default")
    model = bundled.load("default").model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many small forwards: two threads on a busy machine make them several times slower
    try:
        return grounded_labels(model, make_probes(origin.encode, heldout_text(), origin.trained_length))
    finally:
        torch.set_num_threads(threads)


def test_the_default_bundle_has_its_known_induction_heads(default_grounded):
    g = default_grounded
    assert [h.label for h in g.heads[1]] == ["induction"] * 4  # layer 1: 0.91-0.93 on random bytes twice
    assert all(h.score > 0.85 for h in g.heads[1])
    assert all(h.label != "induction" for h in g.heads[0])
    assert g.groups["induction"]["heads"] == [[1, h] for h in range(4)]
    assert g.groups["induction"]["effect"] > 3.0  # together they carry the copy (second copy: ~0.05 -> ~5 nats)
    assert all(h.confirmed == (h.effect >= MIN_EFFECT) for row in g.heads for h in row)
    js = g.to_json()
    assert js["heads"][1][0]["label"] == "induction" and js["unit"] == "nats per token"
    back = GroundedLabel.from_json(js["heads"][1][0])
    assert back.label == "induction" and back.sentence().startswith("Head 1.0: induction on repeated random tokens")
