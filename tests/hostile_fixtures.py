"""A window of hostile peers at scale, without training: files written straight into the peers'
folders with the upload time they claim, peers registered on the demo's LocalChain.

Honest-like peers send random sparse updates (encoded for real); the hostile ones send one kind of
bad file each, round robin over KINDS, and EXPECTED names the reason code each must end with.
"""

from __future__ import annotations

import asyncio
import os
import random
import resource
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import safetensors.numpy
import torch

from scoring.decoder import read_format, submission_digest
from scoring.encoder import compress, pack_tensors, signed_file
from scoring.model import param_spec
from scoring.signing import Signer, dev_keypair
from scoring.types import ParamSpec
from scoring.wire import FORMAT, CodecConfig, max_submission_bytes, payload_digest
from validator.demo.runner import DemoRunner
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import object_key, publish

KINDS = ("oversized", "garbage", "nan_lut", "copy", "replay", "wrong_window")
EXPECTED = {
    "oversized": ("invalid", "too_large"),
    "garbage": ("invalid", "bad_header"),
    "nan_lut": ("invalid", "non_finite"),
    # an exact copy within the window of a peer with one window behind it (not yet proven): the order
    # decides nothing (scoring/copy_findings.py `oriented`), every sender is evaluated on its own
    # pages, and none of them is penalised or aggregated for it (scoring/twins.py `owners`)
    "copy": ("ok", None),
    "replay": ("invalid", "duplicate_payload"),
    "wrong_window": ("invalid", "wrong_window"),
}
Tensors = dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class HostileMix:
    """How many extra peers to register, and how many of them are hostile."""

    peers: int = 64
    hostile: int = 50
    update_std: float = 1e-2  # honest-like updates: large enough that real training is no outlier

    def __post_init__(self) -> None:
        if not 0 <= self.hostile < self.peers:
            raise ValueError("need 0 <= hostile < peers (at least one honest-like peer)")


@dataclass(slots=True)
class HostilePeer:
    uid: int
    signer: Signer
    kind: str  # "honest" or one of KINDS
    location: StorageLocation
    last: Tensors | None = field(default=None, repr=False)  # what it sent in the previous window

    @property
    def hotkey(self) -> str:
        return self.signer.ss58_address


def peak_rss_mb() -> float:
    """The process's peak resident set so far (Linux reports kilobytes)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@contextmanager
def rss_sampled(every_s: float = 0.01) -> Iterator[list[float]]:
    """Samples the resident set while the block runs; the list holds [start, peak] afterwards
    (ru_maxrss cannot tell: it is the high-water mark of the whole process so far)."""
    out, stop = [rss_mb()], threading.Event()
    peak = [out[0]]

    def sample() -> None:
        while not stop.wait(every_s):
            peak[0] = max(peak[0], rss_mb())

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        stop.set()
        thread.join(5)
        out.append(max(peak[0], rss_mb()))


class HostileNet:
    """Extra peers beside the runner's own (whose first peer must train honestly: the copy source)."""

    def __init__(self, runner: DemoRunner, mix: HostileMix, seed: int = 0) -> None:
        self.runner, self.mix, self.codec = runner, mix, CodecConfig()
        self.rng = random.Random(seed)
        self.cap = max_submission_bytes(param_spec(runner.state.model.model), self.codec)
        first = max(n.uid for n in runner.chain.neurons()) + 1
        kinds = ["honest"] * (mix.peers - mix.hostile) + [KINDS[i % len(KINDS)] for i in range(mix.hostile)]
        self.peers = []
        for i, kind in enumerate(kinds):
            signer = dev_keypair(f"//gauntlet-hostile-{i}")
            path = (runner.cfg.workdir / "stores" / f"hostile-{i}").resolve()
            peer = HostilePeer(first + i, signer, kind, StorageLocation(scheme="file", path=str(path)))
            runner.chain.register(peer.hotkey, uid=peer.uid)
            runner.chain.commit(peer.hotkey, peer.location.to_commitment())
            self.peers.append(peer)

    def publish(self, window: int, *, hostile: bool) -> None:
        """Every peer's file for `window`; before the hostile window only the honest-like peers and the
        replayers (whose files there are replayed later) publish."""
        wcfg = self.runner.round.cfg.window
        put_start = self.runner.chain.block_timestamp(wcfg.first_block(window + 1))
        source = self._honest_source(window)
        for p in self.peers:
            kind = p.kind if hostile else ("honest" if p.kind in ("honest", "replay") else "")
            if not kind:
                continue
            data, delay = self._file(p, kind, window, source)
            key = object_key(window, p.hotkey)
            asyncio.run(publish(p.location, key, data, mtime=put_start + delay))

    def _honest_source(self, window: int) -> tuple[Tensors, str]:
        """The runner's first (trained) peer's tensors this window and their format: what copiers take."""
        peer = self.runner.network.peers[0]
        data = (Path(peer.location.path) / object_key(window, peer.hotkey)).read_bytes()
        return dict(safetensors.numpy.load(data)), read_format(data) or FORMAT

    def _file(
        self, p: HostilePeer, kind: str, window: int, source: tuple[Tensors, str]
    ) -> tuple[bytes, float]:
        base = self.runner.state.model.base
        if kind == "oversized":
            return bytes(self.cap + 1), 5.0
        if kind == "garbage":
            return self.rng.randbytes(4096), 5.0
        if kind == "copy":
            spec = param_spec(self.runner.state.model.model)
            return resign(p, window, base, *source, spec=spec), 20.0  # the copier uploads after its victim
        if kind == "replay" and p.last is not None:
            return resign(p, window, base, p.last), 5.0
        tensors = self._random_update(p.uid * 1000 + window)
        if kind == "nan_lut":
            first_lut = sorted(n for n in tensors if n.endswith(".lut"))[0]
            tensors[first_lut] = np.array([np.nan, 0, 0, 1], dtype=np.float32)
        p.last = tensors
        return resign(p, window + 5 if kind == "wrong_window" else window, base, tensors), 5.0

    def _random_update(self, seed: int) -> Tensors:
        g = torch.Generator().manual_seed(seed)
        model = self.runner.state.model.model
        delta = {
            n: torch.randn(q.shape, generator=g) * self.mix.update_std for n, q in model.named_parameters()
        }
        return pack_tensors(compress(delta, None, self.codec))


def resign(
    p: HostilePeer, window: int, base: str, tensors: Tensors, fmt: str = FORMAT, spec: ParamSpec | None = None
) -> bytes:
    """A `fmt` file of `tensors` signed by `p` for `window` (as encode_submission signs)."""
    codec = CodecConfig()
    digest = payload_digest(tensors) if spec is None else submission_digest(tensors, spec, codec, fmt)
    return signed_file(tensors, digest, p.signer, window=window, uid=p.uid, base=base, cfg=codec, fmt=fmt)
