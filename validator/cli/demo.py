"""`gauntlet demo`: the README's first command."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from validator.cli.api import serve_in_thread
from validator.cli.common import fail, invalid_configuration, port_in_use
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.behaviours import BUILTIN
from validator.demo.sim.context import Behaviour
from validator.demo.sim.plugins import load_plugin, parse_peers
from validator.demo.summary import DemoSummary, leaderboard_lines, window_line
from validator.telemetry.logs import configure_logging

DEFAULT_PEERS = "honest:4,lazy:1,copycat:1,noise:1,malformed:1"
MAX_PEERS = 255  # a subnet has 256 uids and the validator holds uid 0
DEMO_FILES = ("gauntlet.toml", "chain.sqlite")  # a folder holding either was made by the demo


def behaviours_of(peers: str, plugin: Path | None) -> list[Behaviour]:
    """`--peers` as behaviours; counts are checked before any list is built from them."""
    total = 0
    for part in filter(None, (p.strip() for p in peers.split(","))):
        name, _, count = part.partition(":")
        if count and not (count.isascii() and count.isdigit()):
            raise typer.BadParameter(
                f"count {count!r} of {name!r} is not a whole number", param_hint="'--peers'"
            )
        total += int(count) if count else 1
        if total > MAX_PEERS:
            raise typer.BadParameter(
                f"at most {MAX_PEERS} peers (uids 1-{MAX_PEERS}; uid 0 is the validator)",
                param_hint="'--peers'",
            )
    try:
        known = dict(BUILTIN) | (load_plugin(plugin) if plugin else {})
        return parse_peers(peers, known)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="'--peers'") from None


def _span(first: int, last: int) -> str:
    return f"window {first}" if first == last else f"windows {first}-{last}"


def prepare_workdir(workdir: Path, *, fresh: bool) -> None:
    """Create the work folder (one line when it cannot be); `--fresh` empties one the demo made."""
    if fresh and workdir.exists():
        if "GAUNTLET_DATABASE_URL" in os.environ:
            fail("--fresh cannot empty GAUNTLET_DATABASE_URL: point it at a new database instead")
        if any(workdir.iterdir()) and not any((workdir / f).exists() for f in DEMO_FILES):
            fail(f"{workdir} does not look like a demo work folder: refusing to empty it for --fresh")
        shutil.rmtree(workdir)
    try:
        workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        fail(f"cannot create the work folder {workdir}: {e.strerror or e} (choose another --workdir)")
    if not os.access(workdir, os.W_OK):
        fail(f"cannot write to the work folder {workdir} (choose another --workdir)")


def demo(
    peers: Annotated[
        str, typer.Option(help="Behaviours and counts, e.g. honest:6,lazy:1,copycat:1")
    ] = DEFAULT_PEERS,
    windows: Annotated[int, typer.Option(min=1, help="Windows to run")] = 6,
    workdir: Annotated[Path, typer.Option(help="SQLite file, object stores, corpus, checkpoints")] = Path(
        "gauntlet-demo"
    ),
    no_api: Annotated[bool, typer.Option("--no-api", help="Do not serve the API and dashboard")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="End with one JSON line: windows and peers")
    ] = False,
    plugin: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="Python file with BEHAVIOURS")
    ] = None,
    inner_steps: Annotated[int, typer.Option(min=1, help="Inner AdamW steps per peer and window")] = 20,
    port: Annotated[int, typer.Option(min=1, max=65535, help="API port")] = 8000,
    fresh: Annotated[
        bool, typer.Option("--fresh", help="Start over instead of resuming the workdir")
    ] = False,
    workers: Annotated[
        int, typer.Option(min=0, help="Evaluate on N local Ray workers (the cluster extra); 0: in-process")
    ] = 0,
) -> int:
    """Run a local subnet: simulated honest and adversarial peers, scored by the real validator."""
    configure_logging(quiet=True)
    behaviours = behaviours_of(peers, plugin)
    if not no_api and port_in_use("127.0.0.1", port):  # before minutes of work, not after
        fail(f"port {port} is in use: pass another --port, or --no-api")
    prepare_workdir(workdir, fresh=fresh)
    cfg = DemoConfig(behaviours, windows=windows, workdir=workdir, inner_steps=inner_steps, workers=workers)
    try:
        runner = DemoRunner(cfg)
    except ValidationError as e:  # the demo's settings take GAUNTLET_* overrides from the environment
        invalid_configuration(e)
    labels = runner.network.behaviour_of()  # the dashboard and /v1/peers show each peer's behaviour
    server = None if no_api else serve_in_thread(runner.settings, "127.0.0.1", port, labels)
    summary = DemoSummary(runner.network.behaviour_of())
    start = runner.next_window
    on = f", evaluated on {workers} Ray workers" if workers else ""
    peers_n = len(runner.network.peers)
    typer.echo(f"gauntlet demo: {peers_n} peers, {windows} windows, workdir {workdir}{on}", err=True)
    if start > 1:
        done, todo = _span(1, start - 1), _span(start, start + windows - 1)
        typer.echo(f"resuming {workdir}: {done} committed, running {todo} (--fresh starts over)", err=True)
    state = "initial" if start == 1 else "resumed"
    typer.echo(f"window {start - 1} ({state}): held-out loss {runner.heldout_loss():.4f}", err=True)
    console = Console(stderr=True)
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("windows", total=windows)
        for window in range(start, start + windows):
            progress.update(task, description=f"window {window}: peers train and upload")
            runner.publish(window)
            progress.update(task, description=f"window {window}: the validator scores")
            report = runner.validate(window)
            line = window_line(summary.add(report, runner.heldout_loss()), summary.behaviour)
            progress.console.print(line, soft_wrap=True, markup=False, highlight=False)
            progress.advance(task)
    result = summary.to_json(runner.state.ratings)
    for line in leaderboard_lines(result["peers"]):
        typer.echo(line, err=True)
    typer.echo(f"model shapes for `gauntlet submission inspect --shapes`: {runner.shapes_path}", err=True)
    if as_json:
        typer.echo(json.dumps(result))
    if server is not None:
        if not server[0].started:  # lost the port to another process after the check
            fail(f"the API could not serve on port {port}: pass another --port")
        typer.echo(f"dashboard and API at http://127.0.0.1:{port}/ (Ctrl-C to stop)", err=True)
        try:
            while server[1].is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            server[0].should_exit = True
    return 0
