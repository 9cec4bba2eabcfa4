"""The demo's scenario with every adversary, end to end through the real round loop (SQLite)."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import pytest

from scoring.types import Reason
from storage.ranking import ranked
from tests.e2e_fixtures import FIRST, WINDOWS, ScenarioRun

ADVERSARIES = {"lazy", "copycat", "replay", "noise", "scaled", "stale", "late", "malformed", "free_rider"}
# DemoConfig's BMA warm-up is 3 evaluations; peers that start later (free_rider) need one more window.
SETTLED = range(FIRST + WINDOWS - 2, FIRST + WINDOWS)


@pytest.fixture
def scenario(full_scenario: ScenarioRun) -> ScenarioRun:
    return full_scenario


def _by_behaviour(run: ScenarioRun, index: int) -> dict[str, list[tuple[str, str | None]]]:
    behaviour = run.behaviour()
    out: dict[str, list[tuple[str, str | None]]] = {}
    for p in run.reports[index].peers:
        out.setdefault(behaviour[p.hotkey], []).append((p.status, p.reason))
    return out


def test_every_invalid_submission_has_its_reason(scenario: ScenarioRun) -> None:
    convicted: list[int] = []
    for i, window in enumerate(range(FIRST, FIRST + WINDOWS)):
        seen = _by_behaviour(scenario, i)
        assert all(s == ("ok", None) for s in seen["honest"] + seen["lazy"] + seen["noise"]), seen
        # the copy is evaluated like its victim: the order of the two uploads names a suspect only once
        # the victim has proven its training (its first windows), and the suspect is penalised only in
        # windows where its own pages read under the victim's (scoring/copy_findings.py `convict`);
        # otherwise nobody is, and the copy is not aggregated (unproven: its own pages never gain)
        copied = ("invalid", Reason.COPY), ("invalid", Reason.DUPLICATE_PAYLOAD)
        if seen["copycat"][0] in copied:
            convicted.append(window)
        else:
            assert seen["copycat"][0] == ("ok", None), (window, seen["copycat"])
            behaviour = scenario.behaviour()
            assert "copycat" not in {behaviour[h] for h in scenario.reports[i].selection.gather}
        assert seen["scaled"][0] == ("invalid", Reason.NORM_OUTLIER)
        assert seen["late"][0] == ("late", Reason.LATE)
        assert seen["malformed"][0][0] == "invalid"
        assert seen["malformed"][0][1] in (Reason.NOT_SAFETENSORS, Reason.BAD_HEADER, Reason.NON_FINITE)
        if window > FIRST:  # in their first window these two have nothing old to send
            assert seen["replay"][0] == ("invalid", Reason.WRONG_WINDOW)
            assert seen["stale"][0] == ("invalid", Reason.STALE_BASE)
            # it resends the last aggregate, which repeats the updates aggregated in it (`recycled`),
            # or is all zeros (`zero_update`) when the last window aggregated nothing
            aggregated = scenario.reports[i - 1].selection.gather
            assert seen["free_rider"][0] == ("invalid", Reason.RECYCLED if aggregated else Reason.ZERO_UPDATE)
        else:
            assert seen["free_rider"][0] == ("missing", Reason.MISSING)
    assert convicted and min(convicted) > FIRST + 2, convicted  # never before the victim's proof


def test_after_warm_up_honest_peers_rank_first_and_alone_are_aggregated(scenario: ScenarioRun) -> None:
    behaviour = scenario.behaviour()
    ratings = scenario.runner.state.ratings.peers
    finals = {h: r.final for h, r in ratings.items()}
    honest = [h for h, b in behaviour.items() if b == "honest"]
    cheats = [finals.get(h, 0.0) for h, b in behaviour.items() if b in ADVERSARIES]
    # the leaderboard's top places are the honest peers', aggregated in the last window (among four
    # equals the Plackett-Luce match spreads ordinals around 0: one or two sit under it, hence at a
    # final score of 0, by the machine's float kernels; such a peer still ranks, and is paid, above
    # every peer the aggregate left out)
    board = ranked(ratings.values())
    assert {r.hotkey for r in board[: len(honest)]} == set(honest)
    assert all(ratings[h].last_aggregated == FIRST + WINDOWS - 1 for h in honest)
    assert board[0].final > 0.0 and sum(finals[h] > 0.0 for h in honest) >= len(honest) // 2
    # no cheat has proven training of its own, so none earns a final score (and chain weight): the
    # lazy peer's updates lower held-out loss, which under DESIGN's BMA factor still paid it
    assert max(cheats) == 0.0, (honest, cheats)
    for window in SETTLED:
        report = scenario.reports[window - FIRST]
        chosen = {behaviour[h] for h in report.selection.gather}
        assert chosen and chosen <= {"honest"}, (window, chosen)


def test_the_global_model_improves_every_window_it_aggregates(scenario: ScenarioRun) -> None:
    """Nobody is aggregated before proving its training (three evaluations): the model holds still
    until then, and improves in every window that aggregates."""
    losses = scenario.losses
    for report, (a, b) in zip(scenario.reports, itertools.pairwise(losses), strict=True):
        assert (b < a) if report.selection.gather else (b == a), losses
    assert losses[-1] < 0.8 * losses[0]


def test_weights_follow_the_ranking(scenario: ScenarioRun) -> None:
    sets = scenario.runner.chain.weight_sets()
    assert sets, "weights are set every window in the demo"
    last = sets[-1].weights
    behaviour = scenario.behaviour()
    uid_of = {p.uid: p.hotkey for p in scenario.runner.network.peers}
    paid = {behaviour[uid_of[u]] for u, w in last.items() if w > 0 and u in uid_of}
    assert paid == {"honest"}, paid
    # one window a set in the demo: it pays the peers that window aggregated, none else
    gathered = set(scenario.reports[-1].selection.gather)
    assert {uid_of[u] for u, w in last.items() if w > 0} <= gathered


def test_replay_of_a_committed_window_is_bit_exact(scenario: ScenarioRun) -> None:
    from validator.round.replay import replay_window
    from validator.wiring import load_model, round_config

    runner = scenario.runner
    window = FIRST + 2
    rows = replay_window(
        window, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings),
    )  # fmt: skip
    assert len(rows) == len(runner.network.peers)
    assert [r.hotkey for r in rows if r.differences(0.0)] == []
    assert any(r.stored["score"] is not None for r in rows)
    # the aggregation weights and the links across windows are re-derived and compared too
    weighted = [r for r in rows if r.stored["weight"] is not None]
    assert weighted and all(r.stored["links"] is not None for r in weighted)
    moved = replace(weighted[0], stored={**weighted[0].stored, "weight": weighted[0].stored["weight"] * 1.5})
    assert moved.differences(0.0) == ["weight"]
    # each valid update's inflation (its norm against the clip reference) is recorded and re-derived
    valid = [r for r in rows if r.stored["status"] == "ok"]
    assert valid and all(0.0 < r.stored["inflation"] < 1.25 for r in valid if r in weighted)
    assert all(r.stored["inflation"] is not None for r in valid)
    lifted = replace(valid[0], stored={**valid[0].stored, "inflation": valid[0].stored["inflation"] * 2})
    assert lifted.differences(0.0) == ["inflation"]
    # the retention average the selection reads is part of the stored rating and re-derived too
    measured = [r for r in rows if r.stored["retention"] is not None]
    assert measured and all(r.stored["step_loss"] is not None for r in rows if r.stored["score"] is not None)
    moved_r = replace(measured[0], stored={**measured[0].stored, "retention": 0.5})
    assert moved_r.differences(0.0) == ["retention"]
    # so is the page test's discounted sum (scoring/page_test.py), from recomputed page losses
    proofs = [r for r in rows if r.stored["score"] is not None]
    assert proofs and all(r.stored["proof"] is not None for r in proofs)
    moved_p = replace(proofs[0], stored={**proofs[0].stored, "proof": proofs[0].stored["proof"] + 0.5})
    assert moved_p.differences(0.0) == ["proof"]


def test_replay_re_derives_recycled_work_from_the_archive(scenario: ScenarioRun) -> None:
    """The free rider's resent aggregate is `recycled` in the last window; replay reads the earlier
    windows' updates back from the archive and reaches the same verdict."""
    from validator.round.replay import replay_window
    from validator.wiring import load_model, round_config

    runner, window = scenario.runner, FIRST + WINDOWS - 1
    rows = replay_window(
        window, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings),
    )  # fmt: skip
    rider = next(h for h, b in scenario.behaviour().items() if b == "free_rider")
    row = next(r for r in rows if r.hotkey == rider)
    assert (row.stored["status"], row.stored["reason"]) == ("invalid", Reason.RECYCLED)
    assert row.differences(0.0) == []
    assert [r.hotkey for r in rows if r.differences(0.0)] == []
    # the persistence check compared this window's residuals with the sketches stored 3+ windows
    # before (scoring/persistence.py): replay read the same sketches back and re-derived the evidence
    record = runner.round.ledger.window_detail(window)
    assert record is not None
    measured = [r.hotkey for r in record.ratings if r.state.get("drift_similarity") is not None]
    valid = {r.hotkey for r in rows if r.stored["status"] == "ok"}
    assert len(measured) >= 3 and set(measured) <= valid
    first = next(r for r in rows if r.hotkey == measured[0])
    moved = replace(first, stored={**first.stored, "drift": first.stored["drift"] + 0.01})
    assert moved.differences(0.0) == ["drift"]


def test_workdir_has_everything_replay_needs(scenario: ScenarioRun) -> None:
    workdir = Path(scenario.runner.cfg.workdir)
    assert (workdir / "gauntlet.toml").is_file()
    assert (workdir / "gauntlet.db").is_file()


def test_replay_judges_archived_submissions_from_files(
    scenario: ScenarioRun, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Replay hands the judge each archived submission as a file, as the live round hands it its
    spooled downloads, so updates are read a parameter at a time: given as bytes, every peer's bytes
    and its whole decoded update were held together (8-11 times the window's uploads)."""
    import validator.round.replay as replay
    from validator.wiring import load_model, round_config

    bodies: list[object] = []
    real = replay.file_judge

    def recording(**kwargs: object) -> object:
        judge = real(**kwargs)  # type: ignore[arg-type]

        def wrapped(hotkey: str, uid: int, data: object) -> object:
            bodies.append(data)
            return judge(hotkey, uid, data)  # type: ignore[arg-type]

        return wrapped

    monkeypatch.setattr(replay, "file_judge", recording)
    runner = scenario.runner
    rows = replay.replay_window(
        FIRST + 2, ledger=runner.round.ledger, model=load_model(runner.settings, runner.dataset),
        dataset=runner.dataset, cfg=round_config(runner.settings),
    )  # fmt: skip
    assert [r.hotkey for r in rows if r.differences(0.0)] == []
    assert bodies and all(isinstance(b, Path) for b in bodies), {type(b).__name__ for b in bodies}
    assert not any(b.exists() for b in bodies if isinstance(b, Path))  # removed after the replay
    # in this process's own folder under the workdir, not the system's (often memory) temp folder
    scratch = runner.round.ledger.scratch
    assert scratch is not None and scratch.parent == runner.settings.workdir.resolve() / "tmp"
    assert all(isinstance(b, Path) and b.parent.parent == scratch for b in bodies)
