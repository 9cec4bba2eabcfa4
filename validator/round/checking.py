"""Decode and check every fetched submission (DESIGN.md §5), archiving what was fetched."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType

import structlog

from scoring.authorship import Readings
from scoring.copy_config import CopyTier
from scoring.copy_findings import convict, held_findings
from scoring.decoder import Expected
from scoring.echo import find_echoes
from scoring.lazy_update import judge_submission
from scoring.ranking import Status
from scoring.types import DecodeResult, ParamSpec, Reason, SparseUpdate, Verdict
from scoring.uniqueness import CopyCheck, PeerPayload, examine_copies, offences
from scoring.wire import CodecConfig
from validator.round.check_config import CheckConfig
from validator.round.norms import reject_norm_outliers, reject_zero_updates
from validator.round.outcomes import DECODE, PeerWindow, raised
from validator.round.window import WindowSeed
from validator.stores.objstore import FetchResult

log = structlog.get_logger(__name__)


Judged = tuple[str, DecodeResult]  # (content digest of the bytes, what the decoder made of them)
Body = bytes | Path  # a fetched file: its bytes, or where the fetcher spooled them (issue 14)
Judge = Callable[[str, int, Body], Judged]  # (hotkey, uid, file) -> Judged
Decoder = Callable[[Body, ParamSpec, Expected, CodecConfig], DecodeResult]  # judge_submission's shape


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
            log.error("peer_judging_failed", stage=DECODE, hotkey=hotkey, uid=uid, exc_info=e)
            verdict = Verdict.reject(Reason.INTERNAL_ERROR, raised(DECODE, e))
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


def reject_echoes(
    peers: Sequence[PeerWindow],
    cfg: CheckConfig,
    *,
    seed: int,
    proven: Collection[str],
    copies: CopyCheck,
) -> list[PeerWindow]:
    """Each valid peer whose update is mostly the window's consensus becomes invalid (`echo`), with
    the first copy tier: the mean of the others' work, sent as its own (scoring/echo.py). The pairs
    of `copies`' findings count as one update there: copies of a peer's work whose order is unclear
    would otherwise make up its consensus and reject it as an echo of itself."""
    updates = {p.hotkey: p.update.params for p in peers if p.valid and p.update is not None}
    ties = [(f.offender, f.other) for f in copies.findings]
    echoes = find_echoes(updates, proven, cfg.uniqueness, cfg.echo_ratio, seed, ties)
    return [
        replace(p.reject(Reason.ECHO, echoes[p.hotkey].detail), copy_tier=CopyTier.HALVE)
        if p.hotkey in echoes
        else p
        for p in peers
    ]


def find_window_copies(
    peers: Sequence[PeerWindow],
    cfg: CheckConfig,
    *,
    seed: int,
    linked: Collection[str] = (),
    proven: Collection[str] = (),
) -> CopyCheck:
    """Duplicates and near-copies across all valid submissions. Nobody is rejected here: the upload
    order names a suspect (scoring/copy_findings.py `oriented`), which is evaluated like any peer and
    rejected once its own pages confirm it (`convict_copies`)."""
    payloads = []
    for p in peers:
        if p.update is not None and p.fetch is not None:
            seen, resolution = _sighting(p.fetch)
            update, ours = p.update, p.hotkey in linked
            # by payload digest: a re-encoded copy goes through the pairwise check, which orients each pair
            payloads.append(
                PeerPayload(
                    p.hotkey, update.digest, seen, update.params, resolution, ours, proven=p.hotkey in proven
                )
            )
    return examine_copies(payloads, cfg.uniqueness, seed=seed)


def convict_copies(
    peers: Sequence[PeerWindow], copies: CopyCheck, page_t: Mapping[str, float], readings: Readings
) -> tuple[list[PeerWindow], CopyCheck]:
    """After the evaluation: each suspect whose authorship reads under its first uploader's
    (`page_t`, the window's page tests, and `readings`, the flagged pairs' updates on each other's
    pages: scoring/copy_findings.py `convict`) becomes invalid with its finding's tier; every other
    finding is unclear. The readings stay with the findings, for the selection and the proof. A
    convicted peer keeps its evaluation: it is recorded, and replay re-derives the conviction."""
    findings = convict(copies.findings, page_t, readings)
    held = held_findings(copies.watched, findings, page_t, readings)
    findings = sorted([*findings, *held], key=lambda f: (f.offender, f.other))
    # a watched pair's readings are kept only where they found something: replay reads exactly the
    # readings stored with the window's pairs, and a group of twins reads every reading among them
    named = {(f.offender, f.other) for f in findings} | {(f.other, f.offender) for f in findings}
    readings = {pair: t for pair, t in readings.items() if pair in named}
    worst = offences(findings)
    out = []
    for p in peers:
        if p.hotkey in worst:
            f = worst[p.hotkey]
            detail = (
                f"overlap {f.overlap:.2f}, similarity {f.similarity:.2f} with {f.other}, uploaded later, "
                "its pages gained clearly less from the update"
            )
            out.append(replace(p.reject(f.reason, detail), copy_tier=f.tier))
        else:
            out.append(p)
    return out, replace(copies, findings=findings, readings=dict(readings))


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


@dataclass(frozen=True, slots=True)
class Standing:
    """What the rating state says of peers before this window: those whose updates keep resembling
    others' (`linked`, scoring/links.py) and those that have proven their training (`proven`)."""

    linked: frozenset[str] = frozenset()
    proven: frozenset[str] = frozenset()


def check_window(
    peers: Sequence[PeerWindow],
    judge: Judge,
    cfg: CheckConfig,
    seen_before: Callable[[list[str]], set[str]],
    seed: WindowSeed,
    standing: Standing = Standing(),
) -> tuple[list[PeerWindow], CopyCheck]:
    """All checks of §5 in order: decode (1–5) what was not judged yet, replays, empty updates and
    norm outliers (6), uniqueness (7: suspects only, `convict_copies` after the evaluation).

    Uniqueness samples chunks from the window's secret seed, so copiers cannot dodge the sample."""
    checked = decode_all(peers, judge)
    checked = reject_replays(checked, seen_before)
    checked = reject_zero_updates(checked, cfg)
    checked = reject_norm_outliers(checked, cfg, standing.proven)
    copies = find_window_copies(
        checked, cfg, seed=seed.number, linked=standing.linked, proven=standing.proven
    )
    return checked, copies
