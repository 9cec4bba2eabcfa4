"""A peer whose updates keep one direction of their own beyond the honest consensus, window after window.

The copy check (scoring/uniqueness.py) and the links (scoring/links.py) compare peers *with each
other* within a window. A single peer that adds the same hidden direction to honest training every
window resembles nobody else; only its own updates, across windows, share it. Honest updates do
not: each window trains on new pages, and error feedback sends next window what this one left out,
so an honest peer's residuals are *anti*-correlated at short lags and about uncorrelated further
apart (bench_residuals: the mean cosine of residuals at least three windows apart, −0.0128 …
−0.0050 for honest and graded peers, +0.0033 … +0.0044 for `poison_strong`, a fixed direction at
20 % of the update's norm; the same from a 2^16-bucket count sketch: ≤ −0.0033 against +0.0028 …
+0.0047).

Each window the validator keeps, per compared peer, a count sketch of its update's residual: the
update (as a unit vector in sketch space) less its least-squares multiple of the mean of the other
compared peers' unit sketches. The sketch hashes every kept coordinate with one seed for every
window (`sketch_seed`, derived from the validator's secret, so a peer cannot hide a direction in
the hash's blind spots), and is stored rounded to float16 (replay and later windows read the same
values). The peer's *long-lag similarity* this window is the mean cosine of its residual with its
stored residuals `lag` to `horizon` windows before, of windows that aggregated something (a window
that moves nothing leaves the next one at the same base model, and residuals taken at one base
correlate for any peer whose recipe differs from the consensus: validator/round/drift.py), and a
CUSUM keeps its evidence,

    evidence ← min(cap, max(0, evidence + min(similarity − reference, step_cap))),

stored on its rating (`PeerRating.drift`, so replay re-derives it). With `gate` on, a peer whose
evidence reached `alarm` is *drifting*: it is not aggregated (scoring/selection.py), and it is not
penalised otherwise, as nothing says which windows carried the direction. The gate was off at
first: the separation the demo showed came from the warm-up's windows, all at one base model,
where a full honest peer among weaker ones reached the alarm too (+0.0251, +0.0112). Without them,
no peer of ten 24-window runs reached it, `poison_strong` included (docs/fidelity-log.md,
ninth and tenth rounds), nor an honest or graded peer of `honest_only`, `graded` or `weak_half` in
16 windows (peaks +0.0037). It is on: three colluders with two hidden directions at half their
norms (a pair shares one; no link forms) read +0.010 … +0.025 from window 7 and reached the alarm
in windows 9-10 of a 16-window demo run, two or three of them aggregated in every window before.
"""

from __future__ import annotations

import hashlib
import hmac
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pydantic import SecretBytes

from scoring.similarity import count_sketch
from scoring.types import SparseParam

F16 = npt.NDArray[np.float16]


@dataclass(frozen=True, slots=True)
class PersistenceConfig:
    enabled: bool = True  # sketch, store and measure (the API shows the figures)
    # leave a peer at the alarm out of the aggregate. Off until the check compared only windows that
    # aggregated something (it framed a full honest peer among weaker ones in the warm-up's windows);
    # since, no honest or graded peer reached the alarm in 16-window runs (peaks +0.0037), while three
    # colluders with two hidden directions, which no link catches, read +0.010 … +0.025 (fidelity log)
    gate: bool = True
    # 2^14 buckets: 32 KiB per peer and window, stored and held while the window is scored (float16),
    # 0.017 of a 100M-parameter update's wire size; the gate-on measurement used 2^16 (fidelity log)
    bits: int = 14
    lag: int = 3  # residuals closer than this are anti-correlated by error feedback
    horizon: int = 12  # the oldest residual compared, in windows back
    reference: float = 0.002
    step_cap: float = 0.004
    alarm: float = 0.008
    cap: float = 0.016

    def __post_init__(self) -> None:
        if not 8 <= self.bits <= 24:
            raise ValueError("bits must be in [8, 24]")
        if not 1 <= self.lag <= self.horizon:
            raise ValueError("need 1 <= lag <= horizon")
        if not self.reference < self.alarm <= self.cap or self.step_cap <= 0.0:
            raise ValueError("need reference < alarm <= cap and step_cap > 0")


def sketch_seed(secret: bytes | SecretBytes) -> int:
    """The one hash seed of every window's residual sketches: HMAC(secret, …), its first 64 bits."""
    key = secret.get_secret_value() if isinstance(secret, SecretBytes) else secret
    return int(hmac.new(key, b"gauntlet/residual-sketch", hashlib.sha256).hexdigest()[:16], 16)


def update_sketch(update: Mapping[str, SparseParam], bits: int, seed: int) -> F16:
    """(2^bits,) count sketch of every kept value at its flat coordinate (parameters in name order),
    as a unit vector in float16: 2^(bits+1) bytes is all a peer holds until its residual is taken.
    One parameter at a time: a spooled update decodes each on access, and the sum's order is fixed."""
    out = np.zeros(1 << bits, np.float64)
    offset = 0
    for name in sorted(update):
        param = update[name]
        keys = param.indices.numpy().astype(np.int64)[None, :] + offset
        values = param.values.numpy()[None, :]
        # the same multipliers for every parameter and window: a fresh generator from one seed
        out += count_sketch(keys, values, bits, np.random.default_rng(seed)).numpy()[0]
        offset += param.numel
        del param, keys, values
    out /= max(_norm(out), 1e-30)
    return out.astype(np.float16)


def residuals(units: Mapping[str, F16], outside: Collection[str] = ()) -> dict[str, F16]:
    """Each peer's unit residual beyond the mean of the others' unit sketches (module docstring);
    none for fewer than three peers in the consensus (a consensus of one is just another peer).
    Peers `outside` (at the alarm already) get a residual but stay out of every consensus: their
    direction in it would tilt every honest residual alike, window after window.

    Written over the given arrays, one peer at a time (the consensus sum is taken first, in key
    order): the window holds one float16 sketch per peer and a few float64 vectors, nothing more."""
    keys = sorted(units)
    inside = [k for k in keys if k not in outside]
    if len(inside) < 3:
        return {}
    total = np.zeros(units[keys[0]].shape, np.float64)
    for k in inside:
        total += units[k]
    out: dict[str, F16] = {}
    for key in keys:
        own = units[key].astype(np.float64)
        consensus = (total - own) / (len(inside) - 1) if key not in outside else total / len(inside)
        scale = _dot(own, consensus) / max(_dot(consensus, consensus), 1e-30)
        own -= scale * consensus
        own /= max(_norm(own), 1e-30)
        units[key][...] = own  # in place: rounded to float16 as it is stored
        out[key] = units[key]
    return out


def long_lag_similarity(current: F16, earlier: Sequence[F16]) -> float | None:
    """The mean cosine of this window's residual with the earlier ones (None without any), rounded
    as the copy check's similarities are."""
    if not earlier:
        return None
    a = current.astype(np.float64)
    norm_a, cosines = _norm(a), []
    for e in earlier:
        b = e.astype(np.float64)
        denominator = norm_a * _norm(b)
        cosines.append(_dot(a, b) / denominator if denominator > 0.0 else 0.0)
    return round(sum(cosines) / len(cosines), 9)


def _dot(a: npt.NDArray[np.float64], b: npt.NDArray[np.float64]) -> float:
    """numpy's own pairwise sum, never BLAS: a BLAS dot's last bits depend on its thread count, and
    a stored sketch or a decision input must not (a restarted process, replay and the live round
    agree bit for bit)."""
    return float(np.sum(a * b))


def _norm(a: npt.NDArray[np.float64]) -> float:
    return math.sqrt(_dot(a, a))


def next_evidence(evidence: float, similarity: float | None, cfg: PersistenceConfig) -> float:
    """The CUSUM after one window; a window without a measured similarity leaves it as it was."""
    if similarity is None:
        return evidence
    step = min(similarity - cfg.reference, cfg.step_cap)
    return round(min(cfg.cap, max(0.0, evidence + step)), 9)


def over_alarm(evidence: float, cfg: PersistenceConfig) -> bool:
    """Has the evidence reached the alarm? Such a peer leaves the consensus of later residuals."""
    return cfg.enabled and evidence >= cfg.alarm


def drifting(evidence: float, cfg: PersistenceConfig) -> bool:
    """Is the peer left out of the aggregate for it (only with `gate` on)?"""
    return cfg.gate and over_alarm(evidence, cfg)


def encode(residual: F16) -> bytes:
    return residual.astype("<f2").tobytes()


def decode(data: bytes, bits: int) -> F16 | None:
    """A stored residual, or None when its size is not this configuration's (bits changed since)."""
    if len(data) != 2 << bits:
        return None
    return np.frombuffer(data, dtype="<f2").astype(np.float16)
