"""Parse `--peers honest:6,lazy:1` and load outside behaviours from `--plugin FILE`.

A plugin file is ordinary Python the operator chose to run (like a pytest conftest): it defines a
module-level `BEHAVIOURS` list of objects that follow `validator.demo.sim.context.Behaviour`.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from pathlib import Path

from validator.demo.sim.behaviours import BUILTIN
from validator.demo.sim.context import Behaviour


def load_plugin(path: Path) -> dict[str, Behaviour]:
    name = f"gauntlet_plugin_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot load plugin {path}")
    module = importlib.util.module_from_spec(spec)
    # registered before it runs, as `import` does: dataclasses resolve string annotations
    # (`from __future__ import annotations`) through sys.modules[cls.__module__]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    found = getattr(module, "BEHAVIOURS", None)
    if not isinstance(found, list | tuple) or not found:
        raise ValueError(f"{path} must define a non-empty BEHAVIOURS list")
    out: dict[str, Behaviour] = {}
    for b in found:
        if not (
            isinstance(getattr(b, "name", None), str)
            and isinstance(getattr(b, "order", None), int)
            and callable(getattr(b, "submit", None))
        ):
            raise ValueError(f"{path}: {b!r} needs `name: str`, `order: int` and `submit(ctx)`")
        out[b.name] = b
    return out


def parse_peers(text: str, known: Mapping[str, Behaviour] = BUILTIN) -> list[Behaviour]:
    """`honest:6,lazy:1` → six honest then one lazy behaviour, in the order given."""
    peers: list[Behaviour] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, count = part.partition(":")
        if name not in known:
            raise ValueError(f"unknown behaviour {name!r}; known: {', '.join(sorted(known))}")
        n = int(count) if count else 1
        if n < 0:
            raise ValueError(f"negative count for {name}")
        peers.extend([known[name]] * n)
    if not peers:
        raise ValueError("no peers")
    return peers
