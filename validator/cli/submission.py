"""`gauntlet submission encode|inspect|sample`: for miners and operators checking files by hand.

Every error a user can cause (a file that is not safetensors, a bad shapes file or model folder, a
base that is not hex, an unknown wallet) is one line and an exit code, never a traceback: usage
errors exit 1, a rejected submission exits 2 with its one-line JSON report.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, cast

import torch
import typer
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from scoring.checkpoint import config_from_hf
from scoring.decoder import Expected, decode_submission, read_format
from scoring.encoder import compress, encode_submission
from scoring.model import build_model, param_spec
from scoring.signing import Signer, dev_keypair
from scoring.types import Reason
from scoring.wire import FORMAT_V2, FORMATS, CodecConfig

submission_app = typer.Typer(
    no_args_is_help=True, help="Encode and inspect gauntlet/2 (and gauntlet/1) submission files."
)
Spec = dict[str, tuple[int, ...]]
# a file the decoder could not even read as a submission: it has no meaningful size ratio
_UNREADABLE = {Reason.NOT_SAFETENSORS, Reason.BAD_HEADER, Reason.TOO_LARGE}


def _load_shapes(path: Path) -> Spec:
    try:
        raw = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise typer.BadParameter(f"cannot read shapes file {path}: {e}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(isinstance(d, int) and d >= 0 for d in v) for v in raw.values()
    ):
        raise typer.BadParameter("shapes file must map parameter names to lists of non-negative ints")
    return {str(k): tuple(v) for k, v in raw.items()}


def _model_spec(path: Path) -> Spec:
    """The parameter spec of a checkpoint folder (its config.json) or of a config.json itself.

    The model is built on the meta device: shapes only, no weights read or allocated."""
    config = path / "config.json" if path.is_dir() else path
    try:
        cfg = config_from_hf(json.loads(config.read_text()))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
        raise typer.BadParameter(f"cannot read a LLaMA config from {config}: {e!r}") from None
    return param_spec(build_model(cfg, device="meta"))


def _hex64(value: str | None) -> str | None:
    if value is not None and not re.fullmatch(r"[0-9a-f]{64}", value):
        raise typer.BadParameter(f"--base must be 64 lowercase hex digits, not {value[:80]!r}")
    return value


def _report(data: bytes, spec: Spec, base: str | None) -> tuple[dict[str, Any], Any]:
    result = decode_submission(data, spec, Expected(base=base))
    params = sum(int(torch.Size(s).numel()) for s in spec.values())
    meta, readable = result.meta, result.verdict.reason not in _UNREADABLE
    report = {
        "ok": result.verdict.ok,
        "reason": result.verdict.reason,
        "detail": result.verdict.detail,
        "format": read_format(data),
        "window": meta.window if meta else None,
        "uid": meta.uid if meta else None,
        "hotkey": meta.hotkey if meta else None,
        "bytes": len(data),
        "ratio_vs_fp32": round(params * 4 / len(data), 3) if readable and data else None,
        "params": params,
    }
    return report, result.update


@submission_app.command("inspect")
def inspect(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The .safetensors submission")],
    shapes: Annotated[
        Path | None, typer.Option(exists=True, dir_okay=False, help="JSON: parameter name -> shape")
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option(exists=True, help="Checkpoint folder or its config.json (instead of --shapes)"),
    ] = None,
    base: Annotated[str | None, typer.Option(help="Expected base fingerprint (hex)", callback=_hex64)] = None,
    dense: Annotated[Path | None, typer.Option(help="Write the decoded dense update here")] = None,
) -> int:
    """Decode and check a submission; print one JSON object; exit 0 if ok, 2 if rejected."""
    if shapes is not None and model is None:
        spec = _load_shapes(shapes)
    elif model is not None and shapes is None:
        spec = _model_spec(model)
    else:
        raise typer.BadParameter("give exactly one of --shapes and --model")
    report, update = _report(file.read_bytes(), spec, base)
    typer.echo(json.dumps(report))
    if update is None:
        return 2
    if dense is not None:
        save_file({n: p.dense().contiguous() for n, p in update.params.items()}, str(dense))
    return 0


def _signer(uri: str, wallet: str | None, hotkey: str | None, wallet_path: Path | None) -> Signer:
    """A real wallet's hotkey through the bittensor SDK, or a development keypair from `--uri`."""
    if wallet is None and hotkey is None:
        try:
            return cast(Signer, dev_keypair(uri))
        except ValueError as e:  # the keypair library's own words, e.g. "invalid secret uri"
            raise typer.BadParameter(f"--uri {uri!r}: {e}") from None
    if wallet is None or hotkey is None:
        raise typer.BadParameter("--wallet and --hotkey go together")
    import bittensor as bt  # here: the SDK takes seconds to import and only wallets need it

    kwargs = {} if wallet_path is None else {"path": str(wallet_path)}
    try:
        keypair = cast(Signer, bt.Wallet(name=wallet, hotkey=hotkey, **kwargs).hotkey)
    except Exception as e:  # the SDK raises its own keyfile errors (missing, encrypted, corrupt)
        raise typer.BadParameter(f"cannot open hotkey {hotkey!r} of wallet {wallet!r}: {e}") from None
    return keypair


@submission_app.command("encode")
def encode(
    dense: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="Dense pseudo-gradient (.safetensors)")
    ],
    out: Annotated[Path, typer.Option(help="Where to write the submission")],
    window: Annotated[int, typer.Option(min=0)],
    uid: Annotated[int, typer.Option(min=0)],
    base: Annotated[
        str, typer.Option(help="Base fingerprint (hex) of the model trained from", callback=_hex64)
    ] = "0" * 64,
    uri: Annotated[str, typer.Option(help="Dev keypair secret URI, e.g. //Alice")] = "//Alice",
    wallet: Annotated[str | None, typer.Option(help="Sign with this bittensor wallet's hotkey")] = None,
    hotkey: Annotated[str | None, typer.Option(help="The hotkey name within --wallet")] = None,
    wallet_path: Annotated[Path | None, typer.Option(help="Wallets folder (the SDK's default)")] = None,
    fmt: Annotated[str, typer.Option("--format", help=f"One of {', '.join(FORMATS)}")] = FORMAT_V2,
    shapes_out: Annotated[Path | None, typer.Option(help="Also write the SHAPES.json for inspect")] = None,
) -> int:
    """Compress a dense update (no error feedback) and write a signed submission file."""
    if fmt not in FORMATS:
        raise typer.BadParameter(f"--format must be one of {', '.join(FORMATS)}")
    signer = _signer(uri, wallet, hotkey, wallet_path)
    try:
        tensors = load_file(str(dense))
    except (SafetensorError, OSError) as e:
        raise typer.BadParameter(f"{dense} is not a safetensors file of tensors: {e}") from None
    cfg = CodecConfig()
    compressed = compress(tensors, None, cfg)
    data = encode_submission(compressed, window=window, uid=uid, base=base, signer=signer, cfg=cfg, fmt=fmt)
    out.write_bytes(data)
    if shapes_out is not None:
        shapes_out.write_text(json.dumps({n: list(t.shape) for n, t in tensors.items()}))
    params = sum(t.numel() for t in tensors.values())
    report = {"out": str(out), "format": fmt, "bytes": len(data), "hotkey": signer.ss58_address}
    typer.echo(json.dumps(report | {"ratio_vs_fp32": round(params * 4 / len(data), 3)}))
    return 0


@submission_app.command("sample")
def sample(
    workdir: Annotated[Path, typer.Option(help="Folder for the sample files")] = Path("gauntlet-sample"),
    seed: Annotated[int, typer.Option()] = 0,
) -> int:
    """Make a random LLaMA-block-shaped update, encode it, and inspect the result."""
    workdir.mkdir(parents=True, exist_ok=True)
    g = torch.Generator().manual_seed(seed)
    shapes = {"attn.q_proj.weight": (256, 256), "mlp.up_proj.weight": (688, 256), "norm.weight": (256,)}
    save_file(
        {n: torch.randn(s, generator=g) * 1e-3 for n, s in shapes.items()}, str(workdir / "dense.safetensors")
    )
    encode(
        workdir / "dense.safetensors",
        workdir / "submission.safetensors",
        1,
        0,
        shapes_out=workdir / "shapes.json",
    )
    return inspect(workdir / "submission.safetensors", workdir / "shapes.json")
