"""`gauntlet demo`: the README's first command."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from validator.cli_api import serve_in_thread
from validator.demo import DemoConfig, DemoRunner
from validator.demo_summary import DemoSummary, leaderboard_lines, window_line
from validator.logs import configure_logging
from validator.sim.behaviours import BUILTIN
from validator.sim.plugins import load_plugin, parse_peers

DEFAULT_PEERS = "honest:4,lazy:1,copycat:1,noise:1,malformed:1"


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
    port: Annotated[int, typer.Option(help="API port")] = 8000,
) -> int:
    """Run a local subnet: simulated honest and adversarial peers, scored by the real validator."""
    configure_logging(quiet=True)
    try:
        known = dict(BUILTIN) | (load_plugin(plugin) if plugin else {})
        behaviours = parse_peers(peers, known)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    runner = DemoRunner(DemoConfig(behaviours, windows=windows, workdir=workdir, inner_steps=inner_steps))
    server = None if no_api else serve_in_thread(runner.settings, "127.0.0.1", port)
    summary = DemoSummary(runner.network.behaviour_of())
    typer.echo(
        f"gauntlet demo: {len(runner.network.peers)} peers, {windows} windows, workdir {workdir}", err=True
    )
    typer.echo(f"window 0 (initial): held-out loss {runner.heldout_loss():.4f}", err=True)
    start = runner.next_window
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
    result = summary.to_json(runner.round.ratings)
    for line in leaderboard_lines(result["peers"]):
        typer.echo(line, err=True)
    if as_json:
        typer.echo(json.dumps(result))
    if server is not None:
        typer.echo(f"dashboard and API at http://127.0.0.1:{port}/ (Ctrl-C to stop)", err=True)
        try:
            while server[1].is_alive():
                time.sleep(0.5)
        except KeyboardInterrupt:
            server[0].should_exit = True
    return 0
