"""Re-encodings that decode to the very same values (scoring/decoded_digest.py): each changes the
signed payload digest, so each re-signed an old update as new until replays were also compared by
the digest of the decoded values."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.numpy import load

from scoring.decoded_digest import digest_of, param_digest
from scoring.decoder import Expected, decode_submission, summarize_submission
from scoring.types import Reason, SparseParam, SparseUpdate
from scoring.wire import FORMAT, FORMAT_V2
from tests.codec_fixtures import KEY, SPEC, WINDOW, make_file, sign_tensors
from tests.hostile_fixtures import resign
from tests.poison_fixtures import random_file, register, upload
from tests.test_codec_digest import OTHER, DigestLedger, check
from validator.demo.runner import DemoConfig, DemoRunner
from validator.demo.sim.plugins import parse_peers

Tensors = dict[str, np.ndarray]


def _params(tensors: Tensors) -> list[str]:
    return [k.removesuffix(".lut") for k in tensors if k.endswith(".lut")]


def doubled(tensors: Tensors) -> Tensors:
    """Every codebook doubled and every chunk scale halved: exact in binary, the same products."""
    out = dict(tensors)
    for name in _params(tensors):
        out[f"{name}.lut"] = tensors[f"{name}.lut"] * np.float32(2)
        out[f"{name}.scale"] = (tensors[f"{name}.scale"] / np.float16(2)).astype(np.float16)
    return out


def swapped(tensors: Tensors) -> Tensors:
    """Codebook entries 2 and 3 swapped, and every code 2 ↔ 3 (padding codes are 0: untouched)."""
    out = dict(tensors)
    for name in _params(tensors):
        lut = tensors[f"{name}.lut"].copy()
        lut[[2, 3]] = lut[[3, 2]]
        val = tensors[f"{name}.val"]
        out[f"{name}.lut"], out[f"{name}.val"] = lut, val ^ ((val & 0b10101010) >> 1)
    return out


def update_of(data: bytes) -> SparseUpdate:
    got = decode_submission(data, SPEC, Expected(verify_signature=False))
    assert got.update is not None, got.verdict
    return got.update


REENCODINGS: dict[str, Callable[[Tensors], Tensors]] = {"doubled": doubled, "swapped": swapped}


@pytest.mark.parametrize("how", sorted(REENCODINGS))
@pytest.mark.parametrize("fmt", [FORMAT, FORMAT_V2])
def test_a_re_encoding_to_the_same_values_keeps_the_decoded_digest(how: str, fmt: str) -> None:
    original = make_file(0, fmt=fmt)
    again = sign_tensors(REENCODINGS[how](dict(load(original))), fmt, signer=OTHER)
    a, b = update_of(original), update_of(again)
    assert a.digest != b.digest  # the signed payload digest tells them apart
    for name in SPEC:
        assert torch.equal(a.params[name].values, b.params[name].values)
    assert a.decoded is not None and a.decoded == b.decoded
    assert update_of(make_file(1, fmt=fmt)).decoded != a.decoded
    # the streaming path (every parameter decoded once, then dropped) computes the same digest
    _, _, summary = summarize_submission(again, SPEC, Expected(verify_signature=False))
    assert summary is not None and summary.decoded == a.decoded


def test_zeros_and_their_sign_do_not_count() -> None:
    kept = SparseParam((8,), torch.tensor([1, 5]), torch.tensor([0.5, -2.0]))
    padded = SparseParam((8,), torch.tensor([0, 1, 3, 5]), torch.tensor([-0.0, 0.5, 0.0, -2.0]))
    assert param_digest("w", kept) == param_digest("w", padded)
    assert param_digest("w", kept) != param_digest("v", kept)  # the name and shape count
    assert param_digest("w", kept) != param_digest("w", SparseParam((2, 4), kept.indices, kept.values))
    shuffled = SparseParam((8,), torch.tensor([5, 1]), torch.tensor([-2.0, 0.5]))  # built out of order
    assert param_digest("w", kept) == param_digest("w", shuffled)
    moved = SparseParam((8,), torch.tensor([1, 6]), torch.tensor([0.5, -2.0]))
    assert digest_of({"w": kept}) != digest_of({"w": moved})


@pytest.mark.parametrize("how", sorted(REENCODINGS))
def test_last_windows_update_re_encoded_to_the_same_values_is_a_replay(how: str) -> None:
    ledger = DigestLedger()
    original = make_file(0, fmt=FORMAT_V2)
    assert check({KEY.ss58_address: original}, WINDOW, ledger)[KEY.ss58_address].valid
    replay = sign_tensors(REENCODINGS[how](dict(load(original))), FORMAT_V2, signer=OTHER, window=WINDOW + 1)
    fresh = sign_tensors(dict(load(make_file(5, fmt=FORMAT_V2))), FORMAT_V2, window=WINDOW + 1)
    out = check({OTHER.ss58_address: replay, KEY.ss58_address: fresh}, WINDOW + 1, ledger)
    assert out[KEY.ss58_address].valid
    assert (out[OTHER.ss58_address].status, out[OTHER.ss58_address].reason) == (
        "invalid",
        Reason.DUPLICATE_PAYLOAD,
    )


def test_through_the_round_and_its_database_a_re_encoded_replay_is_caught(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A peer resends its own update of window 1 in window 2, codebooks doubled and scales halved,
    re-signed for the new base: the round's ledger (SQLite) knows its decoded digest."""
    for key in [k for k in os.environ if k.startswith("GAUNTLET_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("GAUNTLET_VALIDATOR_SECRET", "s" * 32)
    cfg = DemoConfig(parse_peers("honest:2"), workdir=tmp_path / "d", inner_steps=2, corpus_tokens=100_000)
    runner = DemoRunner(cfg)
    [thief] = register(runner, ["replayer"])
    first = random_file(runner, thief, 1, seed=3)
    runner.publish(1)
    upload(runner, thief, 1, first)
    assert {p.hotkey: p.status for p in runner.validate(1).peers}[thief.hotkey] == "ok"
    runner.publish(2)
    upload(runner, thief, 2, resign(thief, 2, runner.state.model.base, doubled(dict(load(first)))))
    by = {p.hotkey: p for p in runner.validate(2).peers}
    assert (by[thief.hotkey].status, by[thief.hotkey].reason) == ("invalid", Reason.DUPLICATE_PAYLOAD)
    assert all(p.status == "ok" for h, p in by.items() if h != thief.hotkey)
    stored = runner.round.ledger.window_detail(1)  # what window 2 looked up
    assert stored is not None and all(s.decoded_digest for s in stored.submissions if s.status == "ok")
    runner.round.ledger.engine.dispose()


def test_a_re_encoded_copy_is_flagged_beside_a_backdated_twin_of_its_victim() -> None:
    """The victim's bytes re-signed by a peer the polls never saw (timed by its own Last-Modified,
    backdated), and a copy re-encoded to the same values: grouped by decoded digest, the unclear
    twin came first in the group, every pair with it was unclear and the copier went unflagged."""
    import hashlib

    from scoring.copy_findings import convict
    from scoring.ranking import Status
    from scoring.signing import dev_keypair
    from scoring.uniqueness import offences
    from tests.codec_fixtures import BASE, UID
    from validator.round.check_config import CheckConfig
    from validator.round.checking import Standing, check_window, file_judge
    from validator.round.outcomes import PeerTarget, PeerWindow
    from validator.round.window import WindowSeed
    from validator.stores.objstore import FetchResult

    twin_key = dev_keypair("//gauntlet-test-backdated-twin")
    original = make_file(0, fmt=FORMAT_V2)
    files = {
        KEY.ss58_address: (original, 10.0),
        OTHER.ss58_address: (sign_tensors(doubled(dict(load(original))), FORMAT_V2, signer=OTHER), 20.0),
        twin_key.ss58_address: (sign_tensors(dict(load(original)), FORMAT_V2, signer=twin_key), None),
    }
    for i in range(3):
        key = dev_keypair(f"//gauntlet-test-honest-{i}")
        files[key.ss58_address] = (
            sign_tensors(dict(load(make_file(10 + i))), FORMAT_V2, signer=key),
            30.0 + i,
        )

    def fetched(hotkey: str, data: bytes, seen: float | None) -> FetchResult:
        if seen is None:  # never sighted: its store's Last-Modified, claimed long before
            return FetchResult(hotkey, "ok", data=data, last_modified=0.0)
        return FetchResult(hotkey, "ok", data=data, first_seen=seen, seen_resolution_s=1.0)

    peers = [
        PeerWindow(PeerTarget(UID, h, None), Status.OK, fetch=fetched(h, data, seen))
        for h, (data, seen) in files.items()
    ]
    archive = lambda data: hashlib.sha256(data).hexdigest()  # noqa: E731
    judge = file_judge(window=WINDOW, base=BASE, spec=SPEC, cfg=CheckConfig(), archive=archive)
    standing = Standing(proven=frozenset({KEY.ss58_address}))  # the victim has proven its training
    checked, copies = check_window(
        peers, judge, CheckConfig(), lambda digests: set(), WindowSeed("0" * 64), standing
    )
    assert all(p.valid for p in checked)  # a suspect is evaluated before anything is decided
    suspects = offences(copies.findings)
    assert set(suspects) == {OTHER.ss58_address}
    assert suspects[OTHER.ss58_address].reason in (Reason.COPY, Reason.DUPLICATE_PAYLOAD)
    # convicted once its own pages read under the victim's (scoring/copy_findings.py `convict`)
    read = {OTHER.ss58_address: 0.2, KEY.ss58_address: 2.5}
    assert set(offences(convict(copies.findings, read))) == {OTHER.ss58_address}
    assert not offences(convict(copies.findings, read | {OTHER.ss58_address: 1.0}))


def test_re_reads_of_accepted_files_skip_the_decoded_digest() -> None:
    """The archive's re-reads (the outer step, the recycling check) do not pay for a digest only the
    window's checks use; the verdict and tensors are the same."""
    from scoring.decoder import REREAD

    original = make_file(0, fmt=FORMAT_V2)
    again = decode_submission(original, SPEC, REREAD)
    assert again.update is not None and again.update.decoded is None
    _, _, summary = summarize_submission(original, SPEC, REREAD)
    assert summary is not None and summary.decoded is None
    for name in SPEC:
        assert torch.equal(again.update.params[name].values, update_of(original).params[name].values)
