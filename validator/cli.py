"""The `gauntlet` console command: one entry point, sub-commands wired here and nowhere else."""

from __future__ import annotations

import sys

import typer

# typer ≥ 0.29 vendors its own click: its exceptions are not click's.
from typer._click.exceptions import ClickException

from validator.cli_api import api
from validator.cli_demo import demo
from validator.cli_ops import config_app, db_app, run
from validator.cli_replay import replay
from validator.cli_submission import submission_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Gauntlet: the validator for permissionless pre-training.",
)
app.add_typer(submission_app, name="submission")
app.command("demo")(demo)
app.command("run")(run)
app.command("api")(api)
app.command("replay")(replay)
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")


def main() -> None:
    """Console entry point. Usage errors exit 1 (2 is reserved for rejected submissions)."""
    try:
        rc = app(standalone_mode=False)
    except ClickException as e:
        e.show()
        sys.exit(1)
    except typer.Abort:
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
