"""A peer can take the validator's outer step itself from the published, signed selection."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlparse

import torch

from scoring.aggregation import aggregate_into
from scoring.wire import CodecConfig
from tests.e2e_fixtures import ScenarioRun
from validator.round.publishing import FORMAT, selection_key, verify_selection
from validator.state.global_model import decode_archived


def test_a_peer_reproduces_the_outer_step_from_the_published_selection(full_scenario: ScenarioRun) -> None:
    runner, report = full_scenario.runner, full_scenario.reports[-1]
    assert len(report.selection.gather) >= 2
    location = runner.settings.selection_location
    assert location is not None
    payload = (Path(urlparse(location).path) / selection_key(report.window)).read_bytes()
    assert verify_selection(payload, runner.validator_hotkey)
    doc = json.loads(payload)["selection"]
    assert doc["format"] == FORMAT and doc["next_base"] == runner.state.model.base
    # what a peer has: the model at the window's start, the gathered submissions, this document
    assert runner.previous is not None
    model = {name: t.clone() for name, t in runner.previous.items()}
    content = {p.update.digest: p.content_digest or "" for p in report.peers if p.update is not None}
    archive, like = runner.round.ledger.archive, runner.state.model.model
    gather = sorted(doc["gather"], key=lambda e: e["digest"])  # the documented order of the sum
    updates = [decode_archived(archive.get(content[e["digest"]]), like, CodecConfig()) for e in gather]
    weights = [e["weight"] for e in gather]
    aggregate_into(model, updates, doc["clip_reference"], doc["outer_lr"], weights)
    after = dict(runner.state.model.model.named_parameters())
    assert all(torch.equal(model[name], after[name].detach()) for name in model)
    # without the weights (format 1) the plain mean is another model: the document needs them
    plain = {name: t.clone() for name, t in runner.previous.items()}
    aggregate_into(plain, updates, doc["clip_reference"], doc["outer_lr"])
    assert not all(torch.equal(plain[name], after[name].detach()) for name in plain)
