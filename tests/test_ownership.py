"""Whose update it is: of an unclear copy, the sender whose own pages gained decides, not the order
or the rating (scoring/twins.py `owners`). Every input of an honest update is public, so a proven
identity can compute a newcomer's update and publish it first."""

from __future__ import annotations

from pathlib import Path

from scoring.copy_config import CopyTier
from scoring.copy_findings import CONVICTION_MARGIN, CopyFinding, convict
from scoring.selection import Candidate, left_out_for_cause, select_aggregation
from scoring.twins import OWNERSHIP_MARGIN, Twins, crowd_lead, owners
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
    # three senders read: the bar is the margin plus what the better of two chance readings leads by
    t = {"a": 3.0, "b": 3.0 - OWNERSHIP_MARGIN - crowd_lead(2), "c": 2.5, "d": -1.0, "e": 0.5, "f": 4.0}
    assert owners(groups, t) == {"b", "d"}  # "g" was not evaluated: not judged, and "f" alone is not


def test_a_crowd_of_copies_cannot_disown_their_author_by_the_luck_of_its_best_member() -> None:
    """Nine identities send one proven peer's update; pages the update never saw read t ~ N(0, 1),
    so their best reads about 1.5. Against the group's best alone the author (t 1.0 this window)
    was left out; the bar rises by what the best of that many reads by chance."""
    crowd = {f"c{i}": t for i, t in enumerate([2.2, 1.6, 1.1, 0.5, 0.2, -0.1, -0.4, -0.9, -1.5])}
    group = [{"author", *crowd}]
    assert crowd_lead(1) == 0.0 and 1.45 < crowd_lead(9) < 1.55 and crowd_lead(99) > 2.4
    assert "author" not in owners(group, crowd | {"author": 1.0})
    assert "author" in owners(group, crowd | {"author": 2.2 - OWNERSHIP_MARGIN - crowd_lead(9)})
    # the copies whose own pages read far under the author's are still left out
    assert owners(group, crowd | {"author": 3.0}) == {"c3", "c4", "c5", "c6", "c7", "c8"}
    # a pair is judged as it was: the bar is the margin alone
    assert owners([{"a", "b"}], {"a": 2.0, "b": 2.0 - OWNERSHIP_MARGIN}) == {"b"}


def test_the_order_names_a_suspect_and_only_its_own_pages_convict_it() -> None:
    """A clear finding (a proven first uploader, an unproven later one) penalises its offender only
    when both were evaluated and the offender's own pages read `CONVICTION_MARGIN` under the first's;
    otherwise nobody is named (the larger hotkey is the finding's offender, as for any unclear pair)."""
    suspect = CopyFinding("a-later", "z-first", 1.0, CopyTier.BAN, "copy")
    cases = {
        (0.5, 0.5 + CONVICTION_MARGIN): True,  # exactly the margin under
        (0.5, 0.25 + CONVICTION_MARGIN): False,
        (-1.0, 2.5): True,
        (2.4, 0.1): False,  # the later sender's pages gained: its own update, published second
        (None, 2.5): False,  # the suspect was not evaluated
        (0.0, None): False,  # nor the first uploader
    }
    for (mine, theirs), convicted in cases.items():
        read = {k: t for k, t in (("a-later", mine), ("z-first", theirs)) if t is not None}
        [found] = convict([suspect], read)
        assert found.clear is convicted, (mine, theirs)
        assert (found.offender, found.other) == (
            ("a-later", "z-first") if convicted else ("z-first", "a-later")
        )
    unclear = CopyFinding("b", "a", 1.0, CopyTier.BAN, "copy", clear=False)
    assert convict([unclear], {"a": 3.0, "b": -3.0}) == [unclear]  # only the order names suspects


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


def test_a_proven_frontrunner_cannot_ban_a_newcomer_by_publishing_its_update_first(tmp_path: Path) -> None:
    """`frontrun_newcomer` proves training of its own for three windows, then publishes each update
    of uid 1, a newcomer that joins then, before the newcomer does. The order named the newcomer,
    unproven and later, the copier: before, it was rejected and banned for 20 windows at its first
    upload, and the frontrunner was aggregated (and paid) for its work. Now the order only names a
    suspect, penalised once its own pages read under the first uploader's (scoring/copy_findings.py
    `convict`): the newcomer's pages gain, the frontrunner's do not."""
    clear_gauntlet_env()
    peers = parse_peers("newcomer:1,honest:3,frontrun_newcomer:1")
    runner = DemoRunner(DemoConfig(peers, windows=7, workdir=tmp_path, corpus_tokens=600_000))
    names = runner.network.behaviour_of()
    newcomer = next(p.hotkey for p in runner.network.peers if p.uid == 1)
    thief = next(h for h, b in names.items() if b == "frontrun_newcomer")
    assert names[newcomer] == "newcomer"
    stolen: list[bool] = []
    for w in range(1, 8):
        runner.publish(w)
        report = runner.validate(w)
        by_key = {p.hotkey: p for p in report.peers}
        if w >= 4:  # the newcomer publishes, and the frontrunner sends its update first
            assert by_key[newcomer].valid and by_key[newcomer].evaluation is not None, w
            assert by_key[thief].evaluation is not None, w  # one update: read on both senders' pages
            stolen.append(thief in report.selection.gather)
    assert not runner.state.ratings.peers[newcomer].banned(7)
    assert stolen.count(True) <= 1, stolen  # left out where its own pages read under the newcomer's
