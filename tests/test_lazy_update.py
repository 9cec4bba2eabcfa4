"""Stored updates (scoring/lazy_update.py) against the eager decoder: the same verdicts, the same
tensors bit for bit, and the same results wherever a window uses them."""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest
import torch

from scoring.aggregation import aggregate_into
from scoring.clipping import clip_factors, median_norms
from scoring.decoder import Expected, decode_submission
from scoring.lazy_update import StoredFileChanged, StoredParams, judge_file, judge_submission
from scoring.loss_score import apply_sparse, restore
from scoring.model import ModelConfig, build_model, param_spec
from scoring.similarity import sample_blocks, sampled
from scoring.types import SparseParam, SparseUpdate, param_norms
from scoring.uniqueness import PeerPayload, UniquenessConfig, find_copies
from scoring.wire import FORMAT, FORMAT_V2, CodecConfig
from tests.codec_fixtures import SPEC, expect, make_file
from tests.fuzz_decoder import mutate
from validator.state.global_model import GlobalModel, decode_archived, replay_aggregates


def _write(tmp_path: Path, data: bytes, name: str = "sub.safetensors") -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _same_param(a: SparseParam, b: SparseParam) -> None:
    assert a.shape == b.shape
    assert a.indices.dtype == b.indices.dtype == torch.int64
    assert a.values.dtype == b.values.dtype == torch.float32
    assert torch.equal(a.indices, b.indices)
    assert torch.equal(a.values.view(torch.int32), b.values.view(torch.int32))  # bits, not values


def _pair(tmp_path: Path, seed: int, fmt: str) -> tuple[SparseUpdate, SparseUpdate]:
    data = make_file(seed, fmt=fmt)
    eager = decode_submission(data, SPEC, expect()).update
    stored = judge_file(_write(tmp_path, data, f"{seed}-{fmt[-1]}"), SPEC, expect()).update
    assert eager is not None and stored is not None
    return eager, stored


@pytest.mark.parametrize("fmt", [FORMAT, FORMAT_V2])
def test_stored_update_is_the_eager_one_bit_for_bit(tmp_path: Path, fmt: str) -> None:
    eager, stored = _pair(tmp_path, 3, fmt)
    assert isinstance(stored.params, StoredParams)
    assert (stored.meta, stored.digest, stored.nbytes) == (eager.meta, eager.digest, eager.nbytes)
    assert list(stored.params) == list(eager.params) and len(stored.params) == len(SPEC)
    for name in SPEC:
        _same_param(stored.params[name], eager.params[name])
    for name, p in stored.params.params_iter():
        _same_param(p, eager.params[name])
    assert stored.norms() == eager.norms()  # recorded when judged, equal to the decoded values' norms
    assert "embed.weight" in stored.params and "nope" not in stored.params
    with pytest.raises(KeyError):
        stored.params["nope"]


def test_a_mutated_file_gets_the_eager_verdict(tmp_path: Path) -> None:
    rng = random.Random(5)
    originals = [make_file(s, fmt=f) for s in range(2) for f in (FORMAT, FORMAT_V2)]
    reasons = set()
    for i in range(300):
        data = mutate(rng.choice(originals), rng)
        exp = Expected(verify_signature=bool(i % 2))
        eager = decode_submission(data, SPEC, exp)
        stored = judge_file(_write(tmp_path, data), SPEC, exp)
        assert stored.verdict == eager.verdict
        assert stored.meta == eager.meta
        assert (stored.update is None) == (eager.update is None)
        reasons.add(eager.verdict.reason)
    assert len(reasons) >= 6, reasons  # the mutations reached many different checks


def test_an_empty_file_is_judged_not_raised(tmp_path: Path) -> None:
    result = judge_file(_write(tmp_path, b""), SPEC, expect())
    assert result.verdict == decode_submission(b"", SPEC, expect()).verdict
    assert not result.verdict.ok


def test_a_file_changed_after_its_check_raises_on_access(tmp_path: Path) -> None:
    path = _write(tmp_path, make_file(1))
    stored = judge_file(path, SPEC, expect()).update
    assert stored is not None
    path.write_bytes(path.read_bytes()[:-4])
    with pytest.raises(StoredFileChanged):
        stored.params["embed.weight"]


def _updates(tmp_path: Path, n: int) -> tuple[list[SparseUpdate], list[SparseUpdate]]:
    pairs = [_pair(tmp_path, s, FORMAT_V2 if s % 2 else FORMAT) for s in range(n)]
    return [e for e, _ in pairs], [s for _, s in pairs]


def _model(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {n: torch.randn(s, generator=g) for n, s in SPEC.items()}


def test_aggregation_of_stored_updates_is_bit_identical(tmp_path: Path) -> None:
    eager, stored = _updates(tmp_path, 4)
    reference = median_norms([u.norms() for u in eager[:3]])
    a, b = _model(), _model()
    norms_a = aggregate_into(a, [u.params for u in eager], reference, 0.4)
    norms_b = aggregate_into(b, [u.params for u in stored], reference, 0.4)
    assert norms_a == norms_b
    for name in SPEC:
        assert torch.equal(a[name].view(torch.int32), b[name].view(torch.int32))


def test_clip_factors_use_recorded_norms(tmp_path: Path) -> None:
    eager, stored = _updates(tmp_path, 3)
    reference = {name: 0.5 * n for name, n in eager[0].norms().items()}
    for e, s in zip(eager, stored, strict=True):
        assert clip_factors(s.params, reference) == clip_factors(e.params, reference)


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        for name, t in _model(7).items():
            self.register_parameter(name.replace(".", "_"), torch.nn.Parameter(t))


def test_loss_score_apply_and_restore_are_bit_identical(tmp_path: Path) -> None:
    eager, stored = _updates(tmp_path, 1)

    def renamed(params: Mapping[str, SparseParam]) -> dict[str, SparseParam]:
        return {name.replace(".", "_"): params[name] for name in params}

    model = _Model()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    saved = apply_sparse(model, renamed(eager[0].params), {}, 0.08)  # type: ignore[arg-type]
    applied_eager = {n: p.detach().clone() for n, p in model.named_parameters()}
    restore(saved)
    saved = apply_sparse(model, renamed(stored[0].params), {}, 0.08)  # type: ignore[arg-type]
    for n, p in model.named_parameters():
        assert torch.equal(p.detach().view(torch.int32), applied_eager[n].view(torch.int32))
    restore(saved)
    for n, p in model.named_parameters():
        assert torch.equal(p.detach(), before[n])


def test_copy_checks_on_stored_updates_match(tmp_path: Path) -> None:
    eager, stored = _updates(tmp_path, 5)
    cfg = UniquenessConfig(sample_blocks=4)
    blocks_e = sample_blocks(eager[0].params, cfg, np.random.default_rng(3))
    blocks_s = sample_blocks(stored[0].params, cfg, np.random.default_rng(3))
    assert blocks_e == blocks_s
    idx_e, val_e = sampled([u.params for u in eager], blocks_e)
    idx_s, val_s = sampled([u.params for u in stored], blocks_s)
    assert np.array_equal(idx_e, idx_s) and np.array_equal(val_e.view(np.int32), val_s.view(np.int32))

    def payloads(updates: list[SparseUpdate]) -> list[PeerPayload]:
        # peer 4 re-sends peer 0's update under its own name: a duplicate, and a copy pair to compare
        out = [PeerPayload(f"p{i}", u.digest, float(i), u.params, 0.5) for i, u in enumerate(updates)]
        return [*out, PeerPayload("copier", updates[0].digest + "x", 9.0, updates[0].params, 0.5)]

    assert find_copies(payloads(stored), cfg, seed=11) == find_copies(payloads(eager), cfg, seed=11)
    assert find_copies(payloads(stored), cfg, seed=11)  # the planted copy is found


def test_replayed_aggregates_from_stored_files_are_bit_identical() -> None:
    model_a, model_b = build_model(ModelConfig.tiny(), seed=1), build_model(ModelConfig.tiny(), seed=1)
    spec = param_spec(model_a)
    blobs = [make_file(s, spec=spec, fmt=FORMAT_V2 if s else FORMAT) for s in range(3)]
    eager = [decode_archived(b, model_a, CodecConfig()) for b in blobs]
    reference = median_norms([param_norms(u) for u in eager])
    digests = [f"{i:064x}" for i in range(3)]
    a, b = GlobalModel(model_a, "0" * 64, 5), GlobalModel(model_b, "0" * 64, 5)
    a.advance(eager, digests, reference, 0.4)
    replay_aggregates(b, [(digests, blobs, reference, ())], outer_lr=0.4, codec=CodecConfig())
    assert (a.base, a.window) == (b.base, b.window)
    for (name, pa), (_, pb) in zip(model_a.named_parameters(), model_b.named_parameters(), strict=True):
        assert torch.equal(pa.detach().view(torch.int32), pb.detach().view(torch.int32)), name


def test_judge_submission_takes_bytes_or_a_file(tmp_path: Path) -> None:
    data = make_file(2)
    in_memory = judge_submission(data, SPEC, expect())
    on_disk = judge_submission(_write(tmp_path, data), SPEC, expect())
    assert in_memory.update is not None and on_disk.update is not None
    assert isinstance(on_disk.update.params, StoredParams) and isinstance(in_memory.update.params, dict)
    assert (in_memory.verdict, in_memory.update.digest) == (on_disk.verdict, on_disk.update.digest)


def test_the_outer_step_does_not_depend_on_the_selection_order() -> None:
    """The rating order of the gathered peers must not reach the model: float addition in another
    order rounds differently, so updates are summed in payload-digest order whatever order is given."""
    models = [build_model(ModelConfig.tiny(), seed=1) for _ in range(3)]
    spec = param_spec(models[0])
    eager = [decode_archived(make_file(s, spec=spec), models[0], CodecConfig()) for s in range(4)]
    reference = median_norms([param_norms(u) for u in eager])
    digests, weights = [f"{i:064x}" for i in (3, 1, 2, 0)], [0.1, 0.7, 0.3, 0.9]
    for model, order in zip(models, [(0, 1, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1)], strict=True):
        gm = GlobalModel(model, "0" * 64, 5)
        gm.advance(
            [eager[i] for i in order],
            [digests[i] for i in order],
            reference,
            1.0,
            [weights[i] for i in order],
        )
    for name, first in models[0].named_parameters():
        for other in models[1:]:
            assert torch.equal(
                first.detach().view(torch.int32),
                dict(other.named_parameters())[name].detach().view(torch.int32),
            ), name
    unsorted = build_model(ModelConfig.tiny(), seed=1)  # summed in the given order: another model
    aggregate_into(
        dict(unsorted.named_parameters()),
        [eager[i] for i in (2, 0, 3, 1)],
        reference,
        1.0,
        [weights[i] for i in (2, 0, 3, 1)],
    )
    assert any(
        not torch.equal(p.detach(), dict(models[0].named_parameters())[n].detach())
        for n, p in unsorted.named_parameters()
    )
