"""`gauntlet data build|verify`: the operator's path from text to the shards the validator reads."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn

from scoring.data import MANIFEST_NAME
from validator.cli.common import fail
from validator.cli.data_build import BuildConfig, build_dataset, input_files, load_tokenizer, verify_dataset

data_app = typer.Typer(no_args_is_help=True, help="Build and verify token datasets.")


@data_app.command("build")
def build(
    inputs: Annotated[list[Path], typer.Argument(help="JSONL, Parquet or text files, or folders of them")],
    tokenizer: Annotated[Path, typer.Option(help="The subnet's tokenizer.json (a local file)")],
    out: Annotated[Path, typer.Option(help="Folder for the shards and manifest.json")],
    text_field: Annotated[str, typer.Option(help="JSONL field / Parquet column holding the text")] = "text",
    shard_tokens: Annotated[int, typer.Option(min=2, help="Tokens per shard")] = 100_000_000,
    eos: Annotated[str | None, typer.Option(help="End-of-document token (default: the usual ones)")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace a dataset already in --out")] = False,
) -> None:
    """Tokenize text into page shards and a manifest (`GAUNTLET_DATASET_PATH` for the validator)."""
    if not tokenizer.is_file():
        fail(f"no tokenizer at {tokenizer} (a tokenizer.json file)")
    if (out / MANIFEST_NAME).exists() and not force:
        fail(f"{out / MANIFEST_NAME} exists: pass --force to replace that dataset")
    try:
        files = input_files(inputs)
        cfg = BuildConfig(text_field=text_field, shard_tokens=shard_tokens, eos=eos)
        tok = load_tokenizer(tokenizer)
    except ValueError as e:
        fail(str(e))
    total = sum(f.stat().st_size for f in files)
    columns = (*Progress.get_default_columns()[:1], BarColumn(), DownloadColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("tokenizing", total=total)
        try:
            manifest = build_dataset(files, tok, out, cfg, lambda n: bar.advance(task, n))
        except (ValueError, OSError) as e:
            fail(f"cannot build the dataset: {type(e).__name__}: {e}")
    tokens = sum(s.n_tokens for s in manifest.shards)
    report = {"dataset": str(out.resolve()), "files": len(files), "shards": len(manifest.shards)}
    report |= {"tokens": tokens, "vocab_size": manifest.vocab_size, "dtype": manifest.dtype}
    typer.echo(json.dumps(report))


@data_app.command("verify")
def verify(
    path: Annotated[Path, typer.Argument(help="A dataset folder (with manifest.json)")],
    seq_len: Annotated[int, typer.Option(min=1, help="Page length the validator uses")] = 64,
    tokenizer: Annotated[Path | None, typer.Option(help="tokenizer.json to check against")] = None,
) -> None:
    """Check digests, sizes and token ids against the manifest; exit 1 naming the first problem."""
    if not (path / MANIFEST_NAME).is_file():
        fail(f"no dataset at {path}: {MANIFEST_NAME} is missing")
    try:
        report = verify_dataset(path, seq_len=seq_len, tokenizer_path=tokenizer)
    except (ValueError, OSError, KeyError, TypeError) as e:
        fail(f"dataset {path} fails verification: {e}")
    typer.echo(json.dumps(report))
