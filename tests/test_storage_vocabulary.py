"""One vocabulary across the layers: storage cannot import scoring and the API schema is a contract of
its own, so the names and values they repeat are checked against the one definition here."""

from __future__ import annotations

import json
import math
from dataclasses import fields
from typing import get_args

from api.schemas import EvaluationOut, Role
from api.window_views import rating_out
from scoring.loss_score import PeerEval, Timings
from scoring.page_test import PageLosses, fold, stouffer
from scoring.ranking import PeerRating, RatingConfig, Status
from storage import models as m
from storage.records import SELECTION_ROLES, SUBMISSION_STATUSES, EvaluationRecord, RatingRecord
from validator.round.recording import evaluation_record


def test_storage_records_every_submission_status_of_the_enum() -> None:
    # `skipped` is the rating's view of a peer the fetch never reached; its submission is recorded
    # as `missing` with reason `not_attempted`, so storage never holds it.
    assert {Status(s) for s in SUBMISSION_STATUSES} == set(Status) - {Status.SKIPPED}


def test_the_schema_names_the_selection_roles_storage_allows() -> None:
    assert get_args(Role) == SELECTION_ROLES


def test_the_evaluation_fields_agree_everywhere() -> None:
    measured = {f.name for f in fields(PeerEval)} - {"uid", "timings"}
    assert len(measured) == 9
    assert {f.name for f in fields(EvaluationRecord)} == measured | {"hotkey", "timings"}
    assert set(EvaluationOut.model_fields) == measured | {"hotkey"}
    assert set(m.Evaluation.__table__.columns.keys()) == measured | {"window", "hotkey", "timings"}


def test_an_evaluation_record_carries_the_result_unchanged() -> None:
    result = PeerEval(3, 5.5, 5.25, 5.0, 4.75, 0.05, 0.0454, -1, Timings(0.0, 0.1, 0.2, 0.3, 0.6))
    record = EvaluationRecord.of("hk", result, {"total_s": 0.6}, None)
    assert (record.hotkey, record.timings) == ("hk", {"total_s": 0.6})
    assert [getattr(record, f) for f in ("loss_own_before", "loss_own_after", "indicator")] == [5.5, 5.25, -1]
    assert (record.loss_rand_before, record.loss_rand_after, record.score) == (5.0, 4.75, 0.05)
    assert record.own_gain == 0.0454
    assert record.pages is None  # measured before the page test


def test_an_evaluation_records_its_page_losses_as_json_lists() -> None:
    """As the round records them: a non-finite page loss is null (JSON has no NaN, and Postgres
    refuses the token: one such value would fail the window's commit)."""
    pages = PageLosses((5.5, 5.25), (5.0, math.nan), (4.0, 6.0), (3.75, math.inf))
    result = PeerEval(3, 5.375, 5.0625, 5.0, 4.875, 0.025, 0.058, 1, Timings(0, 0, 0, 0, 0), 4.5, pages)
    record = evaluation_record("hk", result)
    assert record.pages == {
        "own_before": [5.5, 5.25], "own_after": [5.0, None],
        "heldout_before": [4.0, 6.0], "heldout_after": [3.75, None],
    }  # fmt: skip
    assert set(record.pages) == {f.name for f in fields(PageLosses)}
    assert json.loads(json.dumps(record.pages, allow_nan=False)) == record.pages


def test_storage_ordinal_is_the_ratings() -> None:
    peer = PeerRating("hk", 1, mu=27.3, sigma=6.1)
    record = RatingRecord("hk", 1, mu=peer.mu, sigma=peer.sigma, bma=0.0, final_score=0.0)
    assert record.ordinal == peer.ordinal == 27.3 - 3 * 6.1


def test_the_api_reads_the_page_test_statistic_as_scoring_computes_it() -> None:
    """The API cannot import scoring: its `proof_z` is the stored sum over the root of its weight,
    which must stay `scoring.page_test.stouffer` of a state the ranking wrote."""
    cfg = RatingConfig().page_test
    total, weight = 0.0, 0.0
    for t in (2.5, -0.9, 0.2, 3.0):
        total, weight = fold(total, weight, t, cfg)
    peer = PeerRating("hk", 1, 25.0, 8.0, evaluations=4, proof_sum=total, proof_weight=weight)
    record = RatingRecord("hk", 1, mu=25.0, sigma=8.0, bma=0.0, final_score=0.0, state=peer.to_dict())
    assert rating_out(record).proof_z == stouffer(total, weight)
    unmeasured = RatingRecord("hk", 1, 25.0, 8.0, 0.0, 0.0, state=PeerRating("hk", 1, 25.0, 8.0).to_dict())
    assert rating_out(unmeasured).proof_z is None and stouffer(0.0, 0.0) is None
