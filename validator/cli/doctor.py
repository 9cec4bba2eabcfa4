"""`gauntlet doctor`: check a configuration end to end before trusting it with a subnet.

One line per check (ok / warn / FAIL, then what was found or what to do), exit 1 when any check
fails. Each check builds what the validator would build from the same settings, so a green doctor
means `gauntlet run` gets past its start.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Literal

import obstore as obs
import torch
import typer

from scoring.data import MANIFEST_NAME, Dataset
from scoring.fingerprint import checkpoint_fingerprint
from scoring.model import count_parameters, select_device
from storage import migrate
from storage.db import make_engine
from validator.cli.common import sqlite_file
from validator.cli.ops import load_settings
from validator.settings import Settings
from validator.stores.objstore import open_store
from validator.telemetry.events import connect
from validator.wiring import blob_store, bucket, chain_for, load_model

Status = Literal["ok", "warn", "FAIL"]


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    status: Status
    detail: str


def check_database(s: Settings) -> Check:
    url = s.masked()["database_url"]
    path = sqlite_file(s.database_url)
    if path is not None and not path.exists():  # reading would create an empty file
        return Check("database", "FAIL", f"no database at {path.resolve()}: run `gauntlet db upgrade`")
    engine = make_engine(s.database_url)
    try:
        at, head = migrate.current(engine), migrate.head()
    finally:
        engine.dispose()
    if at != head:
        return Check(
            "database", "FAIL", f"{url} is at revision {at}, the code at {head}: `gauntlet db upgrade`"
        )
    return Check("database", "ok", f"{url} reachable, migrated to {head}")


def check_redis(s: Settings) -> Check:
    client = connect(s.redis_url)
    if client is None:
        return Check("redis", "warn", "not configured: no live events, no leader lock between processes")
    client.ping()
    return Check("redis", "ok", f"{s.masked()['redis_url']} answers")


def check_chain(s: Settings) -> Check:
    link = chain_for(s)
    chain, hotkey = link.chain, link.hotkey
    head = chain.block()
    where = f"{s.network} netuid {s.netuid}" if s.chain == "subtensor" else f"local chain {s.workdir}"
    mine = [n for n in chain.neurons() if n.hotkey == hotkey]
    if not mine:
        return Check("chain", "FAIL", f"{where} at block {head}: hotkey {hotkey} is not registered")
    if not mine[0].validator_permit:
        return Check(
            "chain", "FAIL", f"{where}: uid {mine[0].uid} ({hotkey}) has no validator permit: stake more"
        )
    return Check("chain", "ok", f"{where} at block {head}: uid {mine[0].uid} {hotkey} has a validator permit")


def _probe(
    put: Callable[[str, bytes], object], get: Callable[[str], bytes], drop: Callable[[str], None]
) -> None:
    key, data = f"gauntlet-doctor-{secrets.token_hex(8)}", secrets.token_bytes(32)
    put(key, data)
    try:
        if get(key) != data:
            raise ValueError("read back different bytes than were written")
    finally:
        drop(key)


def check_archive(s: Settings) -> Check:
    store = blob_store(s)
    _probe(store.put, store.get, store.delete)
    where = s.masked()["archive_url"] or str((Path(s.workdir) / "blobs").resolve())
    return Check("archive store", "ok", f"{where} readable and writable")


def check_selection(s: Settings) -> Check:
    if s.selection_location is None:
        return Check("selection store", "warn", "not configured: peers cannot read the signed selection")
    loc = bucket(s.selection_location, s.selection_access_key_id, s.selection_secret_access_key)
    store = open_store(loc, create=True)
    _probe(
        lambda k, d: obs.put(store, k, d),
        lambda k: bytes(obs.get(store, k).bytes()),
        lambda k: obs.delete(store, k),
    )
    return Check("selection store", "ok", f"{s.masked()['selection_location']} readable and writable")


class Doctor:
    """Runs the checks in order; the dataset is kept for the model check, which needs its vocabulary."""

    def __init__(self, s: Settings) -> None:
        self.s = s
        self.dataset: Dataset | None = None

    def check_dataset(self) -> Check:
        if self.s.dataset_path is None:
            return Check(
                "dataset", "FAIL", "GAUNTLET_DATASET_PATH is not set (build one: gauntlet data build)"
            )
        root = Path(self.s.dataset_path)
        if not (root / MANIFEST_NAME).is_file():
            return Check("dataset", "FAIL", f"no {MANIFEST_NAME} in {root.resolve()}")
        dataset = Dataset.open(root, seq_len=self.s.seq_len)
        changed = dataset.verify()
        if changed:
            return Check("dataset", "FAIL", f"digest differs from the manifest: {', '.join(changed)}")
        self.dataset = dataset
        tokens = sum(sh.n_tokens for sh in dataset.manifest.shards)
        return Check(
            "dataset", "ok", f"{root.resolve()}: manifest verified, {tokens} tokens, {dataset.n_pages} pages"
        )

    def check_model(self) -> Check:
        if self.dataset is None:
            return Check("model", "FAIL", "not loaded: the dataset check failed")
        model = load_model(self.s, self.dataset)
        vocab = self.dataset.manifest.vocab_size
        if model.cfg.vocab_size < vocab:
            return Check(
                "model", "FAIL", f"vocab {model.cfg.vocab_size} is smaller than the dataset's {vocab}"
            )
        fingerprint = checkpoint_fingerprint(dict(model.named_parameters()))
        source = self.s.model_path or f"random init, seed {self.s.model_seed}"
        return Check(
            "model", "ok", f"{source}: {count_parameters(model):,} parameters, fingerprint {fingerprint[:16]}"
        )


def check_gpu(s: Settings) -> Check:
    device = select_device(s.device)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            return Check("gpu", "FAIL", f"device {s.device} configured but no CUDA device is visible")
        index = device.index or 0
        free, total = torch.cuda.mem_get_info(index)
        name = torch.cuda.get_device_name(index)
        return Check("gpu", "ok", f"{name}: {free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
    if s.device == "auto":
        return Check("gpu", "warn", "no CUDA device visible: scoring runs on the CPU")
    return Check("gpu", "ok", f"device {s.device} configured")


def run_checks(s: Settings) -> list[Check]:
    doc = Doctor(s)
    steps: list[tuple[str, Callable[[], Check]]] = [
        ("database", lambda: check_database(s)), ("redis", lambda: check_redis(s)),
        ("chain", lambda: check_chain(s)), ("archive store", lambda: check_archive(s)),
        ("selection store", lambda: check_selection(s)), ("dataset", doc.check_dataset),
        ("model", doc.check_model), ("gpu", lambda: check_gpu(s)),
    ]  # fmt: skip
    out = []
    for name, step in steps:
        try:
            out.append(step())
        except Exception as e:  # the doctor's boundary: any failure is that check's line, not a traceback
            first = (str(e).strip().splitlines() or [""])[0]
            out.append(Check(name, "FAIL", f"{type(e).__name__}: {first}"))
    return out


def doctor(as_json: Annotated[bool, typer.Option("--json", help="One JSON object per check")] = False) -> int:
    """Check the configuration end to end: database, Redis, chain and permit, stores, dataset, model, GPU."""
    checks = run_checks(load_settings())
    for c in checks:
        typer.echo(json.dumps(asdict(c)) if as_json else f"{c.status:<4} {c.name:<16} {c.detail}")
    return 1 if any(c.status == "FAIL" for c in checks) else 0
