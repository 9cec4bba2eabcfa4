"""Links across windows (scoring/links.py) and what the selection does with them."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import torch

from scoring.links import LinkConfig, linked_pairs, update_links
from scoring.ranking import PeerRating, RatingState
from scoring.selection import (
    Candidate,
    SelectionConfig,
    contribution_weights,
    left_out_for_cause,
    select_aggregation,
)
from scoring.twins import Twins
from scoring.types import SparseParam
from scoring.uniqueness import CopyCheck, PeerPayload, UniquenessConfig, examine_copies
from tests.uniqueness_fixtures import random_update
from validator.round.rating import RankingConfig, linked_peers, twins_of

CFG = LinkConfig()


def run(windows: list[dict[tuple[str, str], float]], compared: set[str]) -> dict[str, dict[str, float]]:
    links: dict[str, dict[str, float]] = {}
    for sims in windows:
        links = update_links(links, compared, {k: v for k, v in sims.items() if v >= 0.03}, CFG)
    return links


def test_a_persistent_small_resemblance_links_a_pair_that_no_single_window_flags() -> None:
    # colluders measured +0.06 … +0.20 per window: under every copy threshold, linked by their persistence
    assert linked_pairs(run([{("a", "b"): 0.06}, {("a", "b"): 0.07}], {"a", "b", "c"}), CFG) == []
    links = run([{("a", "b"): 0.06}, {("a", "b"): 0.07}, {("a", "b"): 0.06}], {"a", "b", "c"})
    assert linked_pairs(links, CFG) == [("a", "b")]
    assert links["a"]["b"] == links["b"]["a"]  # stored on both peers' ratings


def test_honest_pairs_fluctuating_around_zero_are_never_linked() -> None:
    # honest pairs measured −0.08 … +0.07, mean −0.01: draw 40 windows of that for 6 pairs
    rng = random.Random(7)
    peers = [f"p{i}" for i in range(4)]
    pairs = [(a, b) for i, a in enumerate(peers) for b in peers[i + 1 :]]
    links: dict[str, dict[str, float]] = {}
    for _ in range(40):
        sims = {p: max(-0.08, min(0.07, rng.gauss(-0.01, 0.03))) for p in pairs}
        links = update_links(links, set(peers), {k: v for k, v in sims.items() if v >= 0.03}, CFG)
        assert linked_pairs(links, CFG) == []


def test_one_or_two_windows_of_resemblance_do_not_link_however_strong() -> None:
    """Honest pairs resemble each other in an odd window (an honest pair in the mixed bench run:
    +0.077, then +0.120, as much as the colluders that window): a link needs a third."""
    assert linked_pairs(run([{("a", "b"): 0.9}, {("a", "b"): 0.9}], {"a", "b"}), CFG) == []
    assert linked_pairs(run([{("a", "b"): 0.077}, {("a", "b"): 0.12}], {"a", "b"}), CFG) == []
    strong = run([{("a", "b"): 0.9}] * 3, {"a", "b"})
    assert linked_pairs(strong, CFG) == [("a", "b")]


def test_evidence_waits_for_both_peers_decays_and_is_capped() -> None:
    links = run([{("a", "b"): 0.9}] * 20, {"a", "b"})
    assert links["a"]["b"] == CFG.cap  # a pair that resembled for long is not linked for ever
    kept = update_links(links, {"a", "c"}, {}, CFG)  # b was not compared: nothing new about (a, b)
    assert kept["a"]["b"] == CFG.cap
    decayed = links
    for _ in range(11):  # unreported windows count as similarity 0: the pair is forgiven in time
        decayed = update_links(decayed, {"a", "b"}, {}, CFG)
    assert decayed == {}


def test_a_linked_group_of_three_is_left_out_and_a_pair_keeps_its_better_member() -> None:
    finals = {"h1": 1.0, "h2": 0.9, "c1": 3.0, "c2": 2.0, "c3": 1.5, "d1": 0.5, "d2": 0.4}
    cands = [Candidate(k, final=f, proven=True, gain=0.01, indicator=1) for k, f in finals.items()]
    ring = [("c1", "c2"), ("c2", "c3"), ("c1", "c3"), ("d1", "d2")]
    sel = select_aggregation(cands, twins=Twins(linked=ring))
    assert set(sel.gather) == {"h1", "h2", "d1"}
    # a resembling peer that is not a candidate (rejected, absent) sinks nobody
    lone = Twins(linked=[("h1", "x"), ("h2", "x"), ("x", "y")])
    assert set(select_aggregation(cands[:2], twins=lone).gather) == {
        "h1",
        "h2",
    }


def test_weights_follow_measured_contribution_and_keep_the_step() -> None:
    full = [Candidate(k, 1.0, True, 0.01, 1) for k in "abcd"]
    equal = contribution_weights(full, SelectionConfig(), typical=0.01)
    assert equal == (0.25, 0.25, 0.25, 0.25)  # equal full updates: the old 1/R mean
    weak = Candidate("w", 1.0, True, 0.005, 1, mass=0.4)
    w = contribution_weights([*full[:2], weak], SelectionConfig(), typical=0.01)
    assert w[2] < w[0] / 3  # half the consensus gain: a quarter of the share
    assert abs(sum(x * c.mass for x, c in zip(w, [*full[:2], weak], strict=True)) - 1.0) < 1e-12
    assert w[0] > 1 / 3  # the weak, short update does not shrink the full ones' step
    assert contribution_weights(full, SelectionConfig(contribution_power=0.0), typical=0.02) == equal


def test_a_lifted_clip_reference_does_not_scale_the_honest_weights() -> None:
    """Three proven peers with inflated norms hold the clip reference's upper quartile: every honest
    update's raw mass falls to 0.6. Masses are read relative to the window's typical one, so the
    honest coefficients stay what they are with an unlifted reference (they scaled up by 1/0.6)."""
    plain = [Candidate(k, 1.0, True, 0.01, 1, mass=1.0) for k in "abcd"]
    lifted = [Candidate(k, 1.0, True, 0.01, 1, mass=0.6) for k in "abcd"]
    lifters = [Candidate(k, 0.5, True, 0.002, 1, mass=1.0) for k in ("x", "y", "z")]
    expected = select_aggregation([*plain, *lifters]).weights
    assert select_aggregation([*lifted, *lifters]).weights == expected
    assert contribution_weights(lifted, SelectionConfig(), typical=0.01)[0] > expected[0] * 1.5  # raw


def test_the_upload_order_of_a_linked_pair_decides_nothing() -> None:
    """The later uploader of a linked pair with a clear order was left out alone, out of the match
    and unpaid: a proven identity that computed its victim's update from public inputs (or mixed a
    tenth of it into its own training) and sent it first made the victim the later side in every
    window of two red-team runs. Between two proven peers the order decides nothing (as for copy
    findings): both pairs are twins, and the sender whose own pages gained most is kept."""

    def rated(h: str, links: dict[str, float]) -> PeerRating:  # proven: three clear own-data evaluations
        return PeerRating(
            hotkey=h,
            uid=ord(h[0]),
            mu=25.0,
            sigma=8.0,
            links=links,
            evaluations=3,
            positives=3,
            margin_sum=3.0,
        )

    state = RatingState(
        {"v": rated("v", {"x": 0.2}), "x": rated("x", {"v": 0.2}), "c": rated("c", {"d": 0.2}),
         "d": rated("d", {"c": 0.2})}, 5,
    )  # fmt: skip
    copies = CopyCheck([], ("c", "d", "v", "x"), {}, {("v", "x"): "x"})  # x uploaded clearly first
    twins = twins_of(state, copies, RankingConfig())
    assert twins.linked == (("c", "d"), ("v", "x"))
    cands = [Candidate(k, 5.0, True, 0.01, 1, inflation=1.0) for k in "cdvx"]
    framed = replace(twins, page_t={"v": 2.4, "x": 1.9, "c": 1.0, "d": 2.0})
    assert set(select_aggregation(cands, twins=framed).gather) == {"d", "v"}
    assert not left_out_for_cause(cands, twins=framed)  # the one not kept still plays the match


def test_unseen_sybils_linked_to_a_victim_cannot_sink_it() -> None:
    """Two unproven sybils send noisy copies of a victim's update from stores that hide from the
    polls: no copy finding is clear, and after three windows the three are linked pairwise (the
    audit reproduced it through `examine_copies`). As a group of three they were all left out, and
    the victim, out of the match too, lost its final score. Links to peers that have not proven
    their training are not acted on; proven colluders are still left out as a group."""
    links = {
        "victim": {"s1": 0.1, "s2": 0.1},
        "s1": {"victim": 0.1, "s2": 0.1},
        "s2": {"victim": 0.1, "s1": 0.1},
    }
    honest = [f"h{i}" for i in range(4)]
    state = RatingState(
        {h: PeerRating(h, i, 30.0, 2.0, links=links.get(h, {})) for i, h in enumerate([*honest, *links])}, 3
    )
    seen = {h: 5.0 for h in [*honest, "victim"]} | {"s1": math.inf, "s2": math.inf}
    twins = twins_of(state, CopyCheck([], tuple(sorted(seen)), {}, {}, seen), RankingConfig())
    # links to identities that have proven nothing are not acted on (validator/round/rating.py `_linked`)
    assert twins.linked == ()
    cands = [Candidate(h, 10.0, True, 0.01, 1, inflation=1.0) for h in [*honest, "victim"]]
    cands += [Candidate(s, 0.0, False, 0.01, 1, inflation=1.0) for s in ("s1", "s2")]
    assert "victim" in select_aggregation(cands, twins=twins).gather
    assert "victim" not in left_out_for_cause(cands, SelectionConfig(), twins)
    # three colluders the validator saw upload together are still left out as a group, and so are
    # colluders that prove their training and hide two of the three from the polls
    proven_state = RatingState(  # three clear own-data evaluations: proven under RatingConfig()
        {h: replace(r, evaluations=3, positives=3, margin_sum=3.0) for h, r in state.peers.items()}, 3
    )
    proven = [replace(c, proven=True, final=10.0) for c in cands]
    sighted = seen | {"s1": 5.0, "s2": 5.0}
    for watched in (sighted, seen):
        twins = twins_of(
            proven_state, CopyCheck([], tuple(sorted(watched)), {}, {}, watched), RankingConfig()
        )
        assert not {"victim", "s1", "s2"} & set(select_aggregation(proven, twins=twins).gather)


def _colluding_window(rng: np.random.Generator) -> list[PeerPayload]:
    """Six honest updates sharing one consensus, and three colluders adding one hidden direction."""
    layout = random_update(rng)
    consensus = {n: rng.standard_normal(p.values.numel()) for n, p in layout.items()}
    hidden = {n: rng.standard_normal(p.values.numel()) for n, p in layout.items()}
    peers = []
    for i, name in enumerate([f"h{i}" for i in range(6)] + ["c0", "c1", "c2"]):
        update = {}
        for n, p in layout.items():
            values = consensus[n] + 1.2 * rng.standard_normal(p.values.numel())
            values += 0.6 * hidden[n] if name.startswith("c") else 0.0
            update[n] = SparseParam(p.shape, p.indices, torch.from_numpy(values.astype(np.float32)))
        peers.append(PeerPayload(name, f"d{i}", 0.0, update, math.inf))
    return peers


def test_linked_peers_are_compared_but_leave_the_consensus() -> None:
    """Colluders' shared direction in the consensus tilts every honest residual alike: honest pairs
    then resemble each other. Once the colluders are linked they leave the consensus (they are still
    compared, so their own evidence keeps moving) and honest pairs stop resembling each other."""
    peers = _colluding_window(np.random.default_rng(7))
    cfg = UniquenessConfig(resemblance_floor=-1.0)  # every pair reported, to read the similarities
    before = examine_copies(peers, cfg, seed=3)
    after = examine_copies([replace(p, linked=p.hotkey.startswith("c")) for p in peers], cfg, seed=3)
    honest = [(f"h{a}", f"h{b}") for a in range(6) for b in range(a + 1, 6)]
    colluders = [("c0", "c1"), ("c0", "c2"), ("c1", "c2")]
    assert not before.findings and before.compared == after.compared and "c0" in after.compared
    mean = lambda check, pairs: sum(check.resemblances[p] for p in pairs) / len(pairs)  # noqa: E731
    assert mean(before, honest) - mean(after, honest) > 0.02  # here -0.08, then -0.16
    # each colluder pair is read as two peers inside are (scoring/similarity.py `as_inside_pairs`)
    assert mean(after, colluders) - mean(before, colluders) > 0.05  # here 0.00, then +0.07
    assert (
        min(after.resemblances[p] for p in colluders)
        > CFG.reference
        > max(after.resemblances[p] for p in honest)
    )


def test_a_crowd_keeps_a_bounded_number_of_partners_each() -> None:
    """Every pair was kept in every rating state: a crowd of 40 resembling each other held 780
    pairs a window (256 identities: 1.9 MB of links stored every window)."""
    crowd = [f"s{i:02d}" for i in range(40)]
    sims = {
        (a, b): 0.2 + 0.001 * ((i * 7) % 13)
        for i, (a, b) in enumerate((a, b) for a in crowd for b in crowd if a < b)
    }
    links = run([sims] * 3, set(crowd))
    assert all(len(partners) <= CFG.max_partners for partners in links.values())
    assert all(links[b][a] == v for a, partners in links.items() for b, v in partners.items())  # symmetric
    linked = linked_pairs(links, CFG)
    assert {h for pair in linked for h in pair} == set(crowd)  # every member still linked: left out
    few = run([{("a", "b"): 0.2}] * 3, {"a", "b", "c"})  # a few partners: as before
    value = few["a"]["b"]
    assert few == {"a": {"b": value}, "b": {"a": value}} and math.isclose(value, 3 * CFG.step_cap)


def test_senders_of_one_update_stay_tied_when_the_one_they_were_matched_with_is_left_out() -> None:
    """Each sender is matched with the group's first upload only: when that one was left out
    (unproven, rated low), the ties went with it and every other sender was aggregated."""
    from scoring.twins import judge_twins

    inf = math.inf
    twins = Twins(
        copies=[("h", "m1"), ("h", "m2")],
        same=[("h", "m1"), ("h", "m2")],
        seen={"h": inf, "m1": inf, "m2": inf},
    )
    final = {"h": 0.0, "m1": 1.0, "m2": 0.9}.__getitem__
    assert judge_twins({"h", "m1", "m2"}, {"h", "m1", "m2"}, final, twins).lesser == {"h", "m2"}
    assert judge_twins({"h", "m1", "m2", "x"}, {"m1", "m2", "x"}, final, twins).lesser == {"m2"}


def test_links_to_identities_that_have_proven_nothing_are_not_acted_on() -> None:
    """An honest peer evaluated beside its copiers (unclear pairs: scoring/copy_findings.py) was
    linked to them, left the links' consensus, and was left out with them as a group from window 6
    of the mixed run. The evidence accrues; it is acted on once both peers have proven training."""
    trio = {"v": {"c1": 0.2, "c2": 0.2}, "c1": {"v": 0.2, "c2": 0.2}, "c2": {"v": 0.2, "c1": 0.2}}

    def state(proven: set[str]) -> RatingState:
        done = {"evaluations": 3, "positives": 3, "margin_sum": 3.0}
        return RatingState(
            {
                h: PeerRating(h, i, 25.0, 8.0, links=trio[h], **(done if h in proven else {}))
                for i, h in enumerate(trio)
            },
            5,
        )

    copies = CopyCheck([], tuple(trio), {}, {})
    assert linked_peers(state({"v"}), RankingConfig()) == set()
    assert twins_of(state({"v"}), copies, RankingConfig()).linked == ()
    assert linked_peers(state({"v", "c1"}), RankingConfig()) == {"v", "c1"}
    assert linked_peers(state(set(trio)), RankingConfig()) == set(trio)
    assert len(twins_of(state(set(trio)), copies, RankingConfig()).linked) == 3
