"""Whose update it is: of an unclear copy, the sender whose own pages gained decides, not the order
or the rating (scoring/twins.py `owners`). Every input of an honest update is public, so a proven
identity can compute a newcomer's update and publish it first."""

from __future__ import annotations

from pathlib import Path

from scoring.selection import Candidate, left_out_for_cause, select_aggregation
from scoring.twins import OWNERSHIP_MARGIN, Twins, owners
from tests.e2e_fixtures import clear_gauntlet_env
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers


def _candidates(thief_final: float = 20.0, victim_proven: bool = False) -> list[Candidate]:
    honest = [Candidate(f"h{i}", 10.0, True, 0.01, 1, mass=1.0, inflation=1.0) for i in range(4)]
    thief = Candidate("thief", thief_final, True, 0.01, 1, mass=1.0, inflation=1.0)
    victim = Candidate("victim", 5.0, victim_proven, 0.01, 1, mass=1.0, inflation=1.0)
    return [*honest, thief, victim]


def _one_update(page_t: dict[str, float]) -> Twins:
    pair = (("thief", "victim"),)
    return Twins(copies=pair, same=pair, page_t=page_t | {f"h{i}": 2.0 for i in range(4)})


def test_a_proven_sender_of_a_newcomers_update_is_left_out_by_its_pages() -> None:
    """Before: the unproven victim could not be aggregated, so the proven thief, its only twin left,
    was (and was paid for the victim's work)."""
    cands = _candidates()
    stolen = _one_update({"victim": 2.4, "thief": 0.1})
    assert set(select_aggregation(cands, twins=stolen).gather) == {"h0", "h1", "h2", "h3"}
    assert "thief" in left_out_for_cause(cands, twins=stolen)  # its gain overstates its work: no match
    # no page evidence, or too little difference: the order and the rating decide, as before
    for unclear in (_one_update({}), _one_update({"victim": 0.5, "thief": 0.1})):
        assert "thief" in select_aggregation(cands, twins=unclear).gather
        assert "thief" not in left_out_for_cause(cands, twins=unclear)


def test_of_two_proven_senders_the_one_whose_pages_gained_more_is_kept_over_the_better_rated() -> None:
    cands = _candidates(thief_final=20.0, victim_proven=True)
    close = _one_update({"victim": 1.2, "thief": 0.9})  # within the margin: nobody disowned
    chosen = select_aggregation(cands, twins=close).gather
    assert "victim" in chosen and "thief" not in chosen
    assert select_aggregation(cands, twins=_one_update({})).gather[0] == "thief"  # by rating, before


def test_owners_reads_each_group_on_its_own_and_skips_the_unevaluated() -> None:
    groups = [{"a", "b", "c"}, {"d", "e"}, {"f", "g"}]
    t = {"a": 3.0, "b": 3.0 - OWNERSHIP_MARGIN, "c": 2.5, "d": -1.0, "e": 0.5, "f": 4.0}
    assert owners(groups, t) == {"b", "d"}  # "g" was not evaluated: not judged, and "f" alone is not


def test_a_frontrunner_in_the_victims_warm_up_frames_nobody_and_gains_nothing(tmp_path: Path) -> None:
    """`frontrun` (validator/demo/sim/adversaries.py) computes uid 1's update from public inputs and
    publishes it first. Before, the victim was the later sender of a duplicate in every window:
    rejected, never evaluated, so never proven (framed, honest coverage 0.75 in bench_fidelity)."""
    clear_gauntlet_env()
    cfg = DemoConfig(parse_peers("honest:3,frontrun:1"), windows=5, workdir=tmp_path, corpus_tokens=600_000)
    runner = DemoRunner(cfg)
    names = runner.network.behaviour_of()
    victim = next(p.hotkey for p in runner.network.peers if p.uid == 1)
    thief = next(h for h, b in names.items() if b == "frontrun")
    gathered: list[set[str]] = []
    for w in range(1, 6):
        runner.publish(w)
        report = runner.validate(w)
        by_key = {p.hotkey: p for p in report.peers}
        assert by_key[victim].valid and by_key[victim].evaluation is not None, w
        assert by_key[thief].evaluation is not None, w  # the same update: both are read on their own pages
        gathered.append(set(report.selection.gather))
    assert all(thief not in g for g in gathered)
    assert victim in gathered[-1]  # proven on its own pages, and aggregated
    assert not runner.state.ratings.peers[victim].banned(5)
