"""`gauntlet replay WINDOW`: stored vs recomputed per peer; exit 0 when identical, 1 otherwise."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from sqlalchemy.exc import SQLAlchemyError

from validator.cli.common import check_model_path, db_error, fail, open_dataset
from validator.cli.ops import load_settings, require_database
from validator.round.config import RoundConfig
from validator.round.replay import FIELDS, ReplayRow, replay_window
from validator.state.ledger import Ledger
from validator.wiring import load_model, open_ledger, round_config


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, dict):  # links: how many, and the strongest (--json shows them all)
        return f"{len(v)}, max {max(v.values()):.3g}" if v else "none"
    return "-" if v is None else str(v)


def _table(rows: list[ReplayRow], tolerance: float) -> list[str]:
    lines = [f"{'uid':>4} {'hotkey':<12} " + " ".join(f"{f:>22}" for f in FIELDS)]
    for row in rows:
        diff = set(row.differences(tolerance))
        cells = []
        for f in FIELDS:
            a, b = _fmt(row.stored.get(f)), _fmt(row.recomputed.get(f))
            cells.append(f"{(a + ' ≠ ' + b) if f in diff else a:>22}")
        # ascii(): a hotkey from a local chain or an older database may hold terminal escapes
        fault = "  (the validator's own fault live: not re-derived)" if row.faulted else ""
        lines.append(f"{row.uid:>4} {ascii(row.hotkey[:12])[1:-1]:<12} " + " ".join(cells) + fault)
    return lines


def replay(
    window: Annotated[int, typer.Argument(min=0, help="A committed window")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of a table")] = False,
    tolerance: Annotated[float, typer.Option(help="Relative float tolerance (0: bit-exact, for CPU)")] = 0.0,
) -> int:
    """Recompute a committed window from stored inputs and show any difference."""
    s = load_settings()
    require_database(s)
    dataset = open_dataset(s)  # the evaluation pages are redrawn from it
    check_model_path(s)
    cfg = round_config(s, dataset)
    try:
        ledger = open_ledger(s, migrate_to_head=False)
        rules = _rules(ledger, window, cfg)
        _warn(window, rules)  # first: a base that no longer rebuilds is the likeliest sign of new rules
        rows = replay_window(window, ledger=ledger, model=load_model(s, dataset), dataset=dataset, cfg=cfg)
    except SQLAlchemyError as e:
        fail(f"cannot reach the database {s.masked()['database_url']}: {db_error(e)}")
    except (LookupError, ValueError) as e:  # not committed, not at head, or a base that does not rebuild
        fail(str(e))
    differing = [row for row in rows if row.differences(tolerance)]
    if as_json:
        out = [
            {
                "hotkey": row.hotkey,
                "uid": row.uid,
                "stored": row.stored,
                "recomputed": row.recomputed,
                "differs": row.differences(tolerance),
                "rederived": not row.faulted,
            }
            for row in rows
        ]
        typer.echo(json.dumps({"window": window, "identical": not differing, "rules": rules, "peers": out}))
    else:
        typer.echo("\n".join(_table(rows, tolerance)))
        typer.echo(f"window {window}: {'identical' if not differing else f'{len(differing)} peers differ'}")
    return 1 if differing else 0


def _warn(window: int, rules: dict[str, tuple[str, str]]) -> None:
    for name, (then, now) in rules.items():
        if then != now:  # differences then come from the rules, not from nondeterminism
            typer.echo(
                f"window {window} was scored under another {name}: {then[:16]} then, {now[:16]} now", err=True
            )


def _rules(ledger: Ledger, window: int, cfg: RoundConfig) -> dict[str, tuple[str, str]]:
    """The settings digest and code version the window was scored under, and today's (none for a
    window that was never stored: replay says so). The header alone: replay loads the window once."""
    stored = ledger.window_rules(window)
    if stored is None:
        return {}
    return {"config digest": (stored[0], cfg.config_digest), "code version": (stored[1], cfg.code_version)}
