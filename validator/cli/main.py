"""The `gauntlet` console command: one entry point, sub-commands wired here and nowhere else."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

# typer ≥ 0.29 vendors its own click: its exceptions are not click's.
from typer._click.core import Context
from typer._click.exceptions import ClickException, UsageError
from typer.core import TyperOption

from validator.cli.api import api
from validator.cli.data import data_app
from validator.cli.demo import demo
from validator.cli.doctor import doctor
from validator.cli.ops import config_app, db_app, run
from validator.cli.replay import replay
from validator.cli.submission import submission_app
from validator.wiring import code_version

_option_type = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx: Context) -> str | None:
    """typer 0.29 labels every flag `<bool>` in help, though a flag takes no value: show none."""
    return None if self.is_flag else _option_type(self, ctx)


TyperOption.display_type_rich = _flag_without_type  # type: ignore[method-assign]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Gauntlet: the validator for permissionless pre-training.",
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"gauntlet {code_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Gauntlet: the validator for permissionless pre-training."""


app.add_typer(submission_app, name="submission")
app.command("demo")(demo)
app.command("run")(run)
app.command("api")(api)
app.command("replay")(replay)
app.command("doctor")(doctor)
app.add_typer(db_app, name="db")
app.add_typer(config_app, name="config")
app.add_typer(data_app, name="data")


def _one_line(e: ClickException) -> str:
    """click's usage errors span three lines (usage, hint, error): one line says the same."""
    hint = ""
    if isinstance(e, UsageError) and e.ctx is not None:
        hint = f" (see '{e.ctx.command_path} --help')"
    return f"error: {' '.join(e.format_message().split())}{hint}"


def main() -> None:
    """Console entry point. Usage errors exit 1 (2 is reserved for rejected submissions)."""
    try:
        rc = app(standalone_mode=False, prog_name="gauntlet")
    except ClickException as e:
        typer.echo(_one_line(e), err=True)
        sys.exit(1)
    except typer.Abort:
        sys.exit(1)
    except OSError as e:  # a path the user gave that cannot be read or written: say which, no traceback
        where = f": {e.filename}" if e.filename else ""
        typer.echo(f"error: {e.strerror or e}{where}", err=True)
        sys.exit(1)
    sys.exit(rc if isinstance(rc, int) else 0)
