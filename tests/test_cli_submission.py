"""`gauntlet submission` through the CLI: one line and an exit code for every user error, formats and
ratios reported honestly, `--model` instead of a shapes file, and signing with a real wallet hotkey."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from scoring.checkpoint import config_to_hf
from scoring.model import ModelConfig, build_model, param_spec
from scoring.wire import FORMAT, FORMAT_V2
from tests.cli_fixtures import Result, call
from tests.codec_fixtures import SPEC, make_file


def one_line_error(result: Result, code: int = 1) -> str:
    assert result[0] == code, result
    lines = result[2].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), result
    return lines[0]


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.json"
    path.write_text(json.dumps({k: list(v) for k, v in SPEC.items()}))
    return path


def inspect(sub: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, dict[str, object]]:
    code, out, _ = call(["submission", "inspect", str(sub), *extra], capsys)
    lines = out.strip().splitlines()
    assert len(lines) == 1, out
    return code, json.loads(lines[0])


@pytest.mark.parametrize("content", [b"", b"hello, this is a text file\n", b"\x00" * 8])
def test_an_empty_or_foreign_file_is_one_line_without_a_ratio(
    content: bytes, tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(content)
    code, report = inspect(sub, capsys, "--shapes", str(shapes))
    assert code == 2 and report["ok"] is False
    assert report["reason"] in ("not_safetensors", "bad_header", "bad_metadata")
    assert report["ratio_vs_fp32"] is None and report["format"] is None


@pytest.mark.parametrize("fmt", [FORMAT, FORMAT_V2])
def test_inspect_reports_the_format_and_ratio(
    fmt: str, tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(make_file(1, fmt=fmt))
    code, report = inspect(sub, capsys, "--shapes", str(shapes))
    assert code == 0 and report["format"] == fmt
    assert report["ratio_vs_fp32"] == round(
        sum(torch.Size(s).numel() for s in SPEC.values()) * 4 / sub.stat().st_size, 3
    )


def test_usage_errors_are_one_line(tmp_path: Path, shapes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sub = tmp_path / "sub.safetensors"
    sub.write_bytes(make_file(0))
    assert "hex" in one_line_error(
        call(["submission", "inspect", str(sub), "--shapes", str(shapes), "--base", "nothex"], capsys)
    )
    assert "exactly one" in one_line_error(call(["submission", "inspect", str(sub)], capsys))
    both = ["submission", "inspect", str(sub), "--shapes", str(shapes), "--model", str(shapes)]
    assert "exactly one" in one_line_error(call(both, capsys))
    assert "config" in one_line_error(
        call(["submission", "inspect", str(sub), "--model", str(shapes)], capsys)
    )


def _encode(dense: Path, out: Path, *extra: str) -> list[str]:
    return ["submission", "encode", str(dense), "--out", str(out), "--window", "5", "--uid", "1", *extra]


def test_encode_refuses_a_file_that_is_not_safetensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dense = tmp_path / "dense.safetensors"
    dense.write_text("not a tensor file")
    line = one_line_error(call(_encode(dense, tmp_path / "out.safetensors"), capsys))
    assert "not a safetensors file" in line and not (tmp_path / "out.safetensors").exists()
    dense.write_bytes(b"")
    one_line_error(call(_encode(dense, tmp_path / "out.safetensors"), capsys))
    save_file({"w": torch.zeros(3)}, str(dense))
    assert "--format" in one_line_error(
        call(_encode(dense, tmp_path / "o", "--format", "gauntlet/9"), capsys)
    )


@pytest.fixture
def checkpoint(tmp_path: Path) -> tuple[Path, Path]:
    """A model folder with only its config.json, and a dense update of that model's shapes."""
    cfg = ModelConfig.tiny()
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    g = torch.Generator().manual_seed(0)
    spec = param_spec(build_model(cfg, device="meta"))
    dense = tmp_path / "dense.safetensors"
    save_file({n: torch.randn(s, generator=g) for n, s in spec.items()}, str(dense))
    return folder, dense


@pytest.mark.parametrize("fmt", [FORMAT, FORMAT_V2])
def test_inspect_takes_the_model_from_a_checkpoint_folder(
    fmt: str, checkpoint: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, dense = checkpoint
    sub = tmp_path / "sub.safetensors"
    code, out, _ = call(_encode(dense, sub, "--format", fmt), capsys)
    assert code == 0 and json.loads(out)["format"] == fmt
    for model in (folder, folder / "config.json"):
        code, report = inspect(sub, capsys, "--model", str(model))
        assert code == 0 and report["ok"] is True and report["format"] == fmt


def test_encode_signs_with_a_wallet_hotkey(
    checkpoint: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import bittensor as bt

    monkeypatch.setenv("HOME", str(tmp_path))  # nothing outside the test's folder is read or written
    wallets = tmp_path / "wallets"
    wallet = bt.Wallet(name="miner", hotkey="hot1", path=str(wallets))
    wallet.create_new_hotkey(use_password=False, overwrite=True, suppress=True)
    folder, dense = checkpoint
    sub = tmp_path / "sub.safetensors"
    args = _encode(dense, sub, "--wallet", "miner", "--hotkey", "hot1", "--wallet-path", str(wallets))
    code, out, _ = call(args, capsys)
    assert code == 0 and json.loads(out)["hotkey"] == wallet.hotkey.ss58_address
    code, report = inspect(sub, capsys, "--model", str(folder))  # the signature verifies
    assert code == 0 and report["hotkey"] == wallet.hotkey.ss58_address
    missing = _encode(dense, sub, "--wallet", "miner", "--hotkey", "nope", "--wallet-path", str(wallets))
    assert "nope" in one_line_error(call(missing, capsys))
    assert "together" in one_line_error(call(_encode(dense, sub, "--wallet", "miner"), capsys))


def test_paths_and_keys_a_miner_gets_wrong_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dense = tmp_path / "dense.safetensors"
    save_file({"w": torch.randn(64)}, str(dense))
    line = one_line_error(call(_encode(dense, tmp_path / "no" / "such" / "out.safetensors"), capsys))
    assert "No such file or directory" in line and "out.safetensors" in line
    line = one_line_error(call(_encode(dense, tmp_path / "o.safetensors", "--uri", "bogus"), capsys))
    assert "--uri" in line
    shapes_out = tmp_path / "missing-dir" / "shapes.json"
    one_line_error(call(_encode(dense, tmp_path / "o.safetensors", "--shapes-out", str(shapes_out)), capsys))
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    one_line_error(call(["submission", "sample", "--workdir", str(blocker)], capsys))
