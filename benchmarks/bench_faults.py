"""Faults at scale: `gauntlet run` SIGKILLed and restarted across a localnet run, one window of
mostly hostile peers, then windows with poisoned submissions.

    .venv/bin/python -m benchmarks.bench_faults [--quick] [--sqlite] [--reference DATABASE_URL]

Run as a module from the repository root: the fault harness it drives (the `gauntlet run` child
and its kills, the hostile and poisoned peers) is the test suite's, imported as the `tests` package.

The kill run compares every committed window with an uninterrupted in-process run of the same
scenario and counts lost windows and duplicated (hotkey, window) rows; the hostile window reports
the peak resident set while it is scored; the poisoned windows are served as `gauntlet run` serves
them and must all be committed. The last line is one JSON object with the figures.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import tempfile
import threading
import time
from pathlib import Path

os.environ["HOME"] = tempfile.mkdtemp(prefix="gauntlet-bench-home-")  # bittensor writes under ~
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch

from storage.db import make_engine, session_scope
from storage.queries import window_detail
from storage.records import WindowRecord
from tests.fault_fixtures import (
    child_env,
    comparable,
    duplicate_rows,
    gauntlet_env,
    make_runner,
    records,
    run_windows,
    window_states,
)
from tests.hostile_fixtures import EXPECTED, HostileMix, HostileNet, peak_rss_mb, rss_sampled
from tests.kill_fixtures import run_with_kills
from tests.poison_fixtures import (
    overflow_header_file,
    raising_decoder,
    raising_evaluator,
    random_file,
    register,
    upload,
)
from tests.storage_fixtures import PG_URL, create_pg_database, drop_pg_database
from validator.round.loop import Judging, Round, WindowState
from validator.service import Retry, serve
from validator.telemetry.logs import configure_logging


def reference_windows(root: Path, span: range, url: str | None) -> list[WindowRecord]:
    """The committed windows of an uninterrupted in-process run of the scenario: read from the
    database at `url` when one was made elsewhere (the test suite passes its shared reference run),
    else run here."""
    if url is None:
        with gauntlet_env():
            reference = make_runner(root / "reference")
        try:
            run_windows(reference, span)
            return records(reference, span)
        finally:
            reference.round.ledger.engine.dispose()
    engine = make_engine(url)
    try:
        with session_scope(engine) as session:
            found = [window_detail(session=session, window=w) for w in span]
    finally:
        engine.dispose()
    missing = [w for w, r in zip(span, found, strict=True) if r is None]
    if missing:
        raise SystemExit(f"the reference at {url} has not committed windows {missing}")
    return [r for r in found if r is not None]


def kill_run(
    root: Path, windows: int, kills: int, seed: int, postgres: bool, reference_url: str | None
) -> dict[str, object]:
    span = range(1, windows + 1)
    reference = reference_windows(root, span, reference_url)
    name = create_pg_database() if postgres else None
    url = PG_URL.format(name=name) if name else f"sqlite:///{root / 'killed' / 'gauntlet.db'}"
    try:
        with gauntlet_env(database_url=url):
            runner = make_runner(root / "killed")
        env = child_env(runner.cfg.workdir, root / "home", {"GAUNTLET_DATABASE_URL": url})
        report = run_with_kills(runner, env, windows=span, kills=kills, seed=seed)
        engine = make_engine(url)
        states, duplicates = window_states(engine), duplicate_rows(engine)
        engine.dispose()
        committed = [w for w in span if states.get(w) == "committed"]
        got = [comparable(r) for r in records(runner, range(1, len(committed) + 1))]
        want = [comparable(r) for r in reference[: len(committed)]]
        runner.round.ledger.engine.dispose()
    finally:
        if name:
            drop_pg_database(name)
    for k in report.kills:
        print(f"kill in window {k.window} {k.delay_s:.2f} s after connect, window committed: {k.committed}")
    done = f"{len(committed)}/{windows} windows committed in {report.seconds:.1f} s"
    print(f"{done}, exit code {report.exit_code}")
    return {
        "runs": len(report.kills) + 1,
        "kills": len(report.kills),
        "restarts": report.restarts,
        "kills_before_commit": sum(not k.committed for k in report.kills),
        "windows_committed": len(committed),
        "lost_windows": windows - len(committed),
        "duplicates": duplicates,
        "windows_equal_to_reference": sum(a == b for a, b in zip(got, want, strict=True)),
        "kill_run_seconds": round(report.seconds, 2),
    }


def hostile_window(root: Path, mix: HostileMix) -> dict[str, object]:
    with gauntlet_env():
        runner = make_runner(root / "hostile", "honest:1")
    net = HostileNet(runner, mix)
    runner.publish(1)
    net.publish(1, hostile=False)
    runner.validate(1)
    runner.publish(2)
    net.publish(2, hostile=True)
    started = time.perf_counter()
    with rss_sampled() as rss:
        report = runner.validate(2)
    seconds = time.perf_counter() - started
    runner.round.ledger.engine.dispose()
    by_hotkey = {p.hotkey: p for p in report.peers}
    wrong = [p.kind for p in net.peers if p.kind != "honest" and (by_hotkey[p.hotkey].status,
             by_hotkey[p.hotkey].reason) != EXPECTED[p.kind]]  # fmt: skip
    scored = sum(by_hotkey[p.hotkey].evaluation is not None for p in net.peers if p.kind == "honest")
    print(
        f"hostile window: {mix.peers} peers ({mix.hostile} hostile) scored in {seconds:.1f} s; "
        f"RSS {rss[0]:.0f} → {rss[1]:.0f} MB; {len(wrong)} hostile with a wrong verdict; "
        f"{scored}/{mix.peers - mix.hostile} honest-like scored; timings {report.timings}"
    )
    return {
        "hostile_peers": mix.peers,
        "hostile": mix.hostile,
        "hostile_wrong_verdicts": len(wrong),
        "honest_scored": scored,
        "hostile_window_seconds": round(seconds, 2),
        "rss_before_hostile_mb": round(rss[0], 1),
        "peak_rss_mb_hostile": round(rss[1], 1),
        "peak_rss_mb_process": round(peak_rss_mb(), 1),
    }


def poisoned_windows(root: Path, windows: int) -> dict[str, object]:
    """Every window has a peer whose file makes the decoder raise, one whose evaluation raises and
    one whose header used to crash the decoder; in the last window (the only one with --quick) every
    evaluation raises (a fault of the validator's, not a peer's): it fails until committed salvaged."""
    with gauntlet_env():
        runner = make_runner(root / "poisoned", "honest:2")
    decode, evaluate, header = register(runner, ["decode", "evaluate", "header"])
    metrics, judging = runner.round.metrics, Judging()

    def connect(old: Round, state: WindowState) -> tuple[Round, WindowState]:
        # what a restarted process builds, with this window's faults
        rnd, runner.state = runner.connect()
        runner.round = dataclasses.replace(rnd, judging=judging, metrics=metrics)
        return runner.round, runner.state

    started, reasons, committed = time.perf_counter(), {}, 0
    for w in range(1, windows + 1):
        every = None if w == windows else {evaluate.uid}
        judging = Judging(raising_decoder({decode.hotkey}), raising_evaluator(every))
        runner.round = dataclasses.replace(runner.round, judging=judging)
        runner.publish(w)
        upload(runner, decode, w, random_file(runner, decode, w, seed=w))
        upload(runner, evaluate, w, random_file(runner, evaluate, w, seed=100 + w))
        upload(runner, header, w, overflow_header_file())
        serve(
            runner.round, runner.state, stop=threading.Event(), reconnect=connect, max_windows=1,
            retry=Retry(pause_s=0.0, salvage_after=2),
        )  # fmt: skip
        runner.round.ledger.engine.dispose()
        connect(runner.round, runner.state)  # serve keeps where the next window starts to itself
        committed += runner.round.ledger.window_state(w) == "committed"
        record = runner.round.ledger.window_detail(w)
        reasons[w] = {s.hotkey: s.reason for s in record.submissions} if record is not None else {}
    runner.round.ledger.engine.dispose()
    internal = sum(r.get(p.hotkey) == "internal_error" for r in reasons.values() for p in (decode, evaluate))
    salvaged = metrics.registry.get_sample_value("gauntlet_windows_salvaged_total") or 0
    seconds = time.perf_counter() - started
    print(
        f"poisoned windows: {committed}/{windows} committed ({salvaged:.0f} salvaged) in {seconds:.1f} s; "
        f"{internal} internal_error verdicts; the crashing header ended {reasons[1].get(header.hotkey)}"
    )
    return {
        "poisoned_windows_run": windows,
        "poisoned_windows_committed": committed,
        "poisoned_windows_salvaged": int(salvaged),
        "poisoned_internal_errors": internal,
        "poisoned_header_reason": reasons[1].get(header.hotkey),
        "poisoned_seconds": round(seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--quick", action="store_true", help="2 windows, 1 kill, 64 hostile-window peers, 1 poisoned window"
    )
    parser.add_argument("--sqlite", action="store_true", help="SQLite instead of the local Postgres")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--reference", metavar="DATABASE_URL",
        help="compare the kill run with this uninterrupted run of the same scenario instead of running one",
    )  # fmt: skip
    args = parser.parse_args()
    torch.set_num_threads(1)
    configure_logging(quiet=True, json_lines=False)  # the poisoned windows log their tracebacks (stderr)
    windows, kills = (2, 1) if args.quick else (6, 5)
    mix = HostileMix(64, 50) if args.quick else HostileMix(256, 200)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-faults-") as tmp:
        out = kill_run(Path(tmp), windows, kills, args.seed, not args.sqlite, args.reference)
        out |= hostile_window(Path(tmp), mix)
        out |= poisoned_windows(Path(tmp), 1 if args.quick else 4)
    out["seconds"] = round(time.perf_counter() - started, 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
