"""Decode and check every fetched submission (DESIGN.md §5), archiving what was fetched."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import median
from types import TracebackType

import structlog

from scoring.clipping import median_norms, quantile_norms
from scoring.decoder import Expected
from scoring.lazy_update import judge_submission
from scoring.proof import proven
from scoring.ranking import RatingConfig, RatingState, Status
from scoring.types import DecodeResult, ParamSpec, Reason, SparseUpdate, Verdict
from scoring.uniqueness import CopyCheck, PeerPayload, UniquenessConfig, examine_copies, offences
from scoring.wire import CodecConfig
from validator.round.outcomes import PeerWindow
from validator.round.window import WindowSeed
from validator.stores.objstore import FetchResult

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class CheckConfig:
    codec: CodecConfig = CodecConfig()
    uniqueness: UniquenessConfig = UniquenessConfig()
    norm_outlier_factor: float = 10.0  # reject an update whose norm exceeds this × the window median
    # the clip reference: this quantile of the proven peers' per-parameter norms (scoring/clipping.py);
    # 0.5 is DESIGN.md's median, which let weak honest peers shrink every full update
    clip_quantile: float = 0.75
    # ... at most this × the median: a quarter of the proven peers with inflated norms would otherwise
    # unclip their own updates up to the norm outlier limit (selection reads masses relative to the
    # window's typical one, so the lift does not scale the honest weights either)
    clip_cap: float = 2.0
    # An update (or one parameter of it) with a total norm at or below this is empty: counted in the
    # clip reference, a crowd of empty sybils would make it 0 and clip every honest update to nothing.
    zero_norm: float = 1e-12
    # updates of this many earlier windows that a submission must not repeat (scoring/recycling.py)
    recycled_windows: int = 2

    def __post_init__(self) -> None:
        if self.norm_outlier_factor <= 1.0:
            raise ValueError("norm_outlier_factor must be > 1")
        if not 0.5 <= self.clip_quantile < 1.0:  # 1 would hand the reference to the largest update
            raise ValueError("clip_quantile must be in [0.5, 1)")
        if self.clip_cap < 1.0:
            raise ValueError("clip_cap must be >= 1 (× the median norm)")
        if not 0.0 <= self.zero_norm < 1e-3:
            raise ValueError("zero_norm must be in [0, 1e-3)")
        if self.recycled_windows < 0:
            raise ValueError("recycled_windows must be >= 0")


Judged = tuple[str, DecodeResult]  # (content digest of the bytes, what the decoder made of them)
Body = bytes | Path  # a fetched file: its bytes, or where the fetcher spooled them (issue 14)
Judge = Callable[[str, int, Body], Judged]  # (hotkey, uid, file) -> Judged
Decoder = Callable[[Body, ParamSpec, Expected, CodecConfig], DecodeResult]  # judge_submission's shape


def judging_failed(p: PeerWindow, stage: str, error: BaseException) -> PeerWindow:
    """The peer whose judging raised: invalid (`internal_error`), the traceback in the log. The
    stored detail names only the exception type: messages may quote what the peer sent."""
    log.error("peer_judging_failed", stage=stage, hotkey=p.hotkey, uid=p.uid, exc_info=error)
    return p.reject(Reason.INTERNAL_ERROR, f"{stage} raised {type(error).__name__}")


def file_judge(
    *,
    window: int,
    base: str,
    spec: ParamSpec,
    cfg: CheckConfig,
    archive: Callable[[Body], str],
    decode: Decoder = judge_submission,
) -> Judge:
    """Archive the bytes first (so replay sees exactly what was judged), then decode and check them.

    A decoder that raises judges that one file `internal_error`; archiving raising is the storage's
    failure, not the peer's, and fails the round."""

    def judge(hotkey: str, uid: int, data: Body) -> Judged:
        digest = archive(data)
        expect = Expected(window=window, uid=uid, hotkey=hotkey, base=base)
        try:
            return digest, decode(data, spec, expect, cfg.codec)
        except Exception as e:  # one peer's file must not stop the window
            log.error("peer_judging_failed", stage="decode", hotkey=hotkey, uid=uid, exc_info=e)
            verdict = Verdict.reject(Reason.INTERNAL_ERROR, f"decode raised {type(e).__name__}")
            return digest, DecodeResult(verdict)

    return judge


class EagerDecoder:
    """Judges each file on a worker thread the moment its download completes, so decoding overlaps
    the downloads still in flight (DESIGN.md §11). Pass it as the fetcher's `on_result`, then take
    the fetched peers' outcomes from `outcomes`; leaving the `with` block stops the worker."""

    def __init__(self, judge: Judge, uids: Mapping[str, int], workers: int = 1) -> None:
        self.judge, self.uids = judge, uids
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gauntlet-decode")
        self.futures: dict[str, Future[Judged]] = {}

    def __enter__(self) -> EagerDecoder:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)

    def __call__(self, result: FetchResult) -> None:
        body = result.data if result.data is not None else result.path
        if body is not None and result.hotkey in self.uids:
            self.futures[result.hotkey] = self.pool.submit(
                self.judge, result.hotkey, self.uids[result.hotkey], body
            )

    def outcomes(self, peers: Sequence[PeerWindow]) -> list[PeerWindow]:
        """Each fetched peer with its file judged: as judged on the worker, or now if it was not."""
        judged = {hotkey: f.result() for hotkey, f in self.futures.items()}

        def judge(hotkey: str, uid: int, data: Body) -> Judged:
            return judged.get(hotkey) or self.judge(hotkey, uid, data)

        return decode_all(peers, judge)


def decode_all(peers: Sequence[PeerWindow], judge: Judge) -> list[PeerWindow]:
    """Each peer that still holds fetched bytes judged, the bytes dropped once archived; the
    others (nothing fetched, or judged already) as they are."""
    out = []
    for p in peers:
        data = (p.fetch.path if p.fetch.data is None else p.fetch.data) if p.fetch is not None else None
        if data is None or p.fetch is None:
            out.append(p)
            continue
        digest, result = judge(p.hotkey, p.uid, data)
        fetched = replace(p, content_digest=digest, fetch=replace(p.fetch, data=None))
        if p.status != Status.OK:
            out.append(fetched)
        elif result.update is None:
            out.append(fetched.reject(result.verdict.reason or Reason.BAD_METADATA, result.verdict.detail))
        else:
            out.append(replace(fetched, update=result.update))
    return out


RELATIVE_EMPTY = 1e-3  # of every valid update's median norm: a proven norm under it does not count


def clip_reference(
    peers: Sequence[PeerWindow], cfg: CheckConfig = CheckConfig(), trusted: Collection[str] = frozenset()
) -> dict[str, float]:
    """The window's per-parameter `clip_quantile` norm over valid updates, at most `clip_cap` × their
    median: the clip reference (§5.6).

    Empty parameters (norm ≤ `zero_norm`) do not count, so they cannot drag it to 0. Once
    some valid peers have proven their training (`trusted`), it is taken over theirs alone: new
    identities are free, so a crowd of sybils sending tiny non-zero updates would otherwise own the
    reference and shrink every honest update to nothing. A proven peer cannot do the same alone:
    per parameter, proven norms under `RELATIVE_EMPTY` × every valid update's median do not count,
    and a parameter without any proven norm left is judged over every valid update."""
    valid = [p.update.norms() for p in peers if p.update is not None]
    proven = [p.update.norms() for p in peers if p.update is not None and p.hotkey in trusted]
    if not valid:
        return {}
    everyone = median_norms(valid, floor=cfg.zero_norm)
    out = {}
    for name in valid[0]:
        # A proven peer's norm far under everyone's median says nothing of the scale: counted, one
        # proven peer sending a parameter empty, or at 1e-12, made it ~0 and clipped every honest
        # update to nothing. A parameter no proven peer really updated is judged over every update.
        floor = max(cfg.zero_norm, RELATIVE_EMPTY * everyone[name])
        column = [{name: n[name]} for n in proven if n[name] > floor] or [{name: n[name]} for n in valid]
        upper = quantile_norms(column, cfg.clip_quantile, floor=cfg.zero_norm)[name]
        middle = median_norms(column, floor=cfg.zero_norm)[name]
        # a coalition holding the upper quartile lifts the reference by at most clip_cap × the median
        out[name] = min(upper, cfg.clip_cap * middle)
    return out


def proven_peers(state: RatingState, cfg: RatingConfig) -> frozenset[str]:
    """Hotkeys that have proven, before this window, that they train on their own data."""
    return frozenset(hotkey for hotkey, rating in state.peers.items() if proven(rating, cfg))


def total_norm(p: PeerWindow) -> float:
    assert p.update is not None
    return float(sum(n * n for n in p.update.norms().values()) ** 0.5)


def reject_zero_updates(peers: Sequence[PeerWindow], cfg: CheckConfig) -> list[PeerWindow]:
    """An update with (near) zero total norm is `zero_update`: it says nothing and would capture the
    clip reference. Each peer's norm is computed on its own: one that raises fails only that peer."""
    out = []
    for p in peers:
        try:
            empty = p.update is not None and total_norm(p) <= cfg.zero_norm
        except Exception as e:  # a peer's own update: isolated
            out.append(judging_failed(p, "norm", e))
            continue
        out.append(p.reject(Reason.ZERO_UPDATE, f"update norm <= {cfg.zero_norm:g}") if empty else p)
    return out


def reject_norm_outliers(peers: Sequence[PeerWindow], cfg: CheckConfig) -> list[PeerWindow]:
    """Reject updates whose total norm is far above the window's median total norm."""
    totals = {p.hotkey: total_norm(p) for p in peers if p.update}
    # empty updates are left out of the median: a crowd of sybils must not make honest peers outliers
    nonzero = [t for t in totals.values() if t > cfg.zero_norm]
    if len(nonzero) < 3:  # a median of one or two peers says nothing about outliers
        return list(peers)
    limit = cfg.norm_outlier_factor * median(nonzero)
    return [
        p.reject(Reason.NORM_OUTLIER, f"norm {totals[p.hotkey]:.3g} > {cfg.norm_outlier_factor}× median")
        if p.hotkey in totals and totals[p.hotkey] > limit
        else p
        for p in peers
    ]


def reject_copies(
    peers: Sequence[PeerWindow], cfg: CheckConfig, *, seed: int, linked: Collection[str] = ()
) -> tuple[list[PeerWindow], CopyCheck]:
    """Duplicates and near-copies across all valid submissions. The offender of a pair whose upload
    order is clear from the validator's own first sight becomes invalid; an unclear pair penalises
    nobody (the selection aggregates one of the two)."""
    payloads = []
    for p in peers:
        if p.update is not None and p.fetch is not None:
            seen, resolution = _sighting(p.fetch)
            update, ours = p.update, p.hotkey in linked
            # by payload digest: a re-encoded copy goes through the pairwise check, which orients each pair
            payloads.append(PeerPayload(p.hotkey, update.digest, seen, update.params, resolution, ours))
    copies = examine_copies(payloads, cfg.uniqueness, seed=seed)
    worst = offences(copies.findings)
    out = []
    for p in peers:
        if p.hotkey in worst:
            f = worst[p.hotkey]
            detail = f"overlap {f.overlap:.2f}, similarity {f.similarity:.2f} with {f.other}, uploaded later"
            out.append(replace(p.reject(f.reason, detail), copy_tier=f.tier))
        else:
            out.append(p)
    return out, copies


def _sighting(f: FetchResult) -> tuple[float, float]:
    """(time, resolution) of the upload as the validator observed it. Without its own sighting the
    store's Last-Modified is peer-controlled: the order is then never clear (infinite resolution)."""
    if f.first_seen is None:
        return f.last_modified or 0.0, math.inf
    return f.first_seen, math.inf if f.seen_resolution_s is None else f.seen_resolution_s


def _digests(update: SparseUpdate) -> set[str]:
    return {update.digest} if update.decoded is None else {update.digest, update.decoded}


def reject_replays(
    peers: Sequence[PeerWindow], seen_before: Callable[[list[str]], set[str]]
) -> list[PeerWindow]:
    """An update already submitted in an earlier window is a replay, whoever re-signed it and however
    it was re-encoded: its payload digest or its decoded digest was seen before."""
    keys = {p.hotkey: _digests(p.update) for p in peers if p.update is not None}
    digests = sorted(set().union(*keys.values())) if keys else []
    seen = seen_before(digests) if digests else set()
    return [
        p.reject(Reason.DUPLICATE_PAYLOAD, "update already submitted in an earlier window")
        if keys.get(p.hotkey, set()) & seen
        else p
        for p in peers
    ]


def check_window(
    peers: Sequence[PeerWindow],
    judge: Judge,
    cfg: CheckConfig,
    seen_before: Callable[[list[str]], set[str]],
    seed: WindowSeed,
    linked: Collection[str] = (),
) -> tuple[list[PeerWindow], CopyCheck]:
    """All checks of §5 in order: decode (1–5) what was not judged yet, replays, empty updates and
    norm outliers (6), uniqueness (7).

    Uniqueness samples chunks from the window's secret seed, so copiers cannot dodge the sample."""
    checked = decode_all(peers, judge)
    checked = reject_replays(checked, seen_before)
    checked = reject_zero_updates(checked, cfg)
    checked = reject_norm_outliers(checked, cfg)
    return reject_copies(checked, cfg, seed=seed.number, linked=linked)
