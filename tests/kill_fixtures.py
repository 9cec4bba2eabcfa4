"""`gauntlet run` as a child process on a localnet whose clock this process drives, SIGKILLed at
seeded random moments and restarted each time."""

from __future__ import annotations

import random
import subprocess
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.fault_fixtures import REPO, reconnect
from validator.demo.runner import DemoRunner

GAUNTLET = REPO / ".venv" / "bin" / "gauntlet"


class ValidatorProcess:
    """`gauntlet run` as a child process, its output in a log file (to tell when it has connected)."""

    def __init__(self, env: Mapping[str, str], log: Path) -> None:
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(
                [str(GAUNTLET), "run"], env=dict(env), cwd=REPO, stdout=out, stderr=subprocess.STDOUT
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_connected(self, timeout_s: float) -> None:
        """Until the child has opened the database and restored its model (its startup line)."""
        end = time.monotonic() + timeout_s
        while '"event": "startup"' not in self.output():
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"gauntlet run did not connect:\n{self.output()[-3000:]}")
            time.sleep(0.02)

    def kill(self) -> None:
        self.proc.kill()  # SIGKILL: no handler, no cleanup, exactly a crash
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM: the current window finishes, then the process exits; returns the exit code."""
        self.proc.terminate()
        return self.proc.wait(timeout=120)


@dataclass(frozen=True, slots=True)
class KillPoint:
    window: int
    delay_s: float  # after the child had connected
    committed: bool  # whether the window had been committed when the kill landed


@dataclass(frozen=True, slots=True)
class KillReport:
    kills: list[KillPoint]
    restarts: int
    exit_code: int
    seconds: float


def wait_committed(runner: DemoRunner, window: int, child: ValidatorProcess, timeout_s: float) -> None:
    end = time.monotonic() + timeout_s
    while (runner.round.ledger.latest_committed() or -1) < window:
        if child.proc.poll() is not None or time.monotonic() > end:
            raise RuntimeError(f"window {window} was not committed:\n{child.output()[-3000:]}")
        time.sleep(0.05)


def run_with_kills(
    runner: DemoRunner, env: Mapping[str, str], *, windows: range, kills: int, seed: int,
    timeout_s: float = 120.0,
) -> KillReport:  # fmt: skip
    """Drive the chain clock from here while a `gauntlet run` child scores; SIGKILL it `kills` times
    at seeded random moments (windows and delays) and restart it each time."""
    rng = random.Random(seed)
    plan = Counter(rng.choice(windows) for _ in range(kills))
    logs = runner.cfg.workdir / "logs"
    logs.mkdir(exist_ok=True)
    started, points = time.monotonic(), list[KillPoint]()
    child: ValidatorProcess | None = None
    try:
        for w in windows:
            if w != windows[0]:
                reconnect(runner)  # peers train from the global model at the start of w
            runner.publish(w)
            child = child or ValidatorProcess(env, logs / f"run-{len(points)}.log")
            for _ in range(plan[w]):
                child.wait_connected(timeout_s)
                delay = rng.uniform(0.0, 1.2)
                time.sleep(delay)
                child.kill()
                points.append(KillPoint(w, delay, (runner.round.ledger.latest_committed() or -1) >= w))
                child = ValidatorProcess(env, logs / f"run-{len(points)}.log")
            wait_committed(runner, w, child, timeout_s)
        if child is None:
            raise ValueError("no window to run")
        child.wait_connected(timeout_s)  # before that, SIGTERM finds no handler installed yet
        code = child.stop()
        return KillReport(points, len(points), code, time.monotonic() - started)
    finally:
        if child is not None and child.proc.poll() is None:
            child.kill()
