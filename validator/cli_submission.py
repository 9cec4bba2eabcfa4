"""`gauntlet submission encode|inspect|sample`: for miners and operators checking files by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import torch
import typer
from safetensors.torch import load_file, save_file

from scoring.decoder import Expected, decode_submission
from scoring.encoder import compress, encode_submission
from scoring.signing import dev_keypair
from scoring.wire import CodecConfig

submission_app = typer.Typer(no_args_is_help=True, help="Encode and inspect gauntlet/1 submission files.")


def _load_shapes(path: Path) -> dict[str, tuple[int, ...]]:
    try:
        raw = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise typer.BadParameter(f"cannot read shapes file {path}: {e}") from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, list) and all(isinstance(d, int) and d >= 0 for d in v) for v in raw.values()
    ):
        raise typer.BadParameter("shapes file must map parameter names to lists of non-negative ints")
    return {str(k): tuple(v) for k, v in raw.items()}


@submission_app.command("inspect")
def inspect(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="The .safetensors submission")],
    shapes: Annotated[Path, typer.Option(exists=True, dir_okay=False, help="JSON: parameter name -> shape")],
    base: Annotated[str | None, typer.Option(help="Expected base fingerprint (hex)")] = None,
    dense: Annotated[Path | None, typer.Option(help="Write the decoded dense update here")] = None,
) -> int:
    """Decode and check a submission; print one JSON object; exit 0 if ok, 2 if rejected."""
    spec = _load_shapes(shapes)
    data = file.read_bytes()
    result = decode_submission(data, spec, Expected(base=base))
    params = sum(int(torch.Size(s).numel()) for s in spec.values())
    meta = result.meta
    report = {
        "ok": result.verdict.ok,
        "reason": result.verdict.reason,
        "detail": result.verdict.detail,
        "window": meta.window if meta else None,
        "uid": meta.uid if meta else None,
        "hotkey": meta.hotkey if meta else None,
        "bytes": len(data),
        "ratio_vs_fp32": round(params * 4 / max(len(data), 1), 3),
        "params": params,
    }
    typer.echo(json.dumps(report))
    if result.update is None:
        return 2
    if dense is not None:
        save_file({n: p.dense().contiguous() for n, p in result.update.params.items()}, str(dense))
    return 0


@submission_app.command("encode")
def encode(
    dense: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, help="Dense pseudo-gradient (.safetensors)")
    ],
    out: Annotated[Path, typer.Option(help="Where to write the submission")],
    window: Annotated[int, typer.Option(min=0)],
    uid: Annotated[int, typer.Option(min=0)],
    base: Annotated[str, typer.Option(help="Base fingerprint (hex) of the model trained from")] = "0" * 64,
    uri: Annotated[str, typer.Option(help="Dev keypair secret URI, e.g. //Alice")] = "//Alice",
    shapes_out: Annotated[Path | None, typer.Option(help="Also write the SHAPES.json for inspect")] = None,
) -> int:
    """Compress a dense update (no error feedback) and write a signed gauntlet/1 file."""
    tensors = load_file(str(dense))
    cfg = CodecConfig()
    data = encode_submission(
        compress(tensors, None, cfg), window=window, uid=uid, base=base, signer=dev_keypair(uri), cfg=cfg
    )
    out.write_bytes(data)
    if shapes_out is not None:
        shapes_out.write_text(json.dumps({n: list(t.shape) for n, t in tensors.items()}))
    typer.echo(json.dumps({"out": str(out), "bytes": len(data), "hotkey": dev_keypair(uri).ss58_address}))
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
