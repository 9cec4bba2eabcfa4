"""A local subnet of simulated peers: registered on a LocalChain, publishing to local folders."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import torch

from scoring.model import LlamaModel
from scoring.signing import Signer, dev_keypair
from validator.chain.local import LocalChain
from validator.demo.sim.context import Behaviour, PeerContext, PeerTools
from validator.stores.commitments import StorageLocation
from validator.stores.objstore import object_key, publish

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class SimPeer:
    uid: int
    signer: Signer
    behaviour: Behaviour
    location: StorageLocation
    memory: dict[str, Any] = field(default_factory=dict)

    @property
    def hotkey(self) -> str:
        return self.signer.ss58_address


def peer_uri(uid: int) -> str:
    return f"//gauntlet-demo-peer-{uid}"


class SimNetwork:
    """Registers one peer per behaviour (uids from 1; uid 0 is the validator) and publishes for them."""

    def __init__(
        self, chain: LocalChain, behaviours: Sequence[Behaviour], stores: Path, tools: PeerTools
    ) -> None:
        self.chain, self.tools = chain, tools
        self.peers: list[SimPeer] = []
        for i, behaviour in enumerate(behaviours, start=1):
            signer = dev_keypair(peer_uri(i))
            location = StorageLocation(scheme="file", path=str((stores / f"peer-{i}").resolve()))
            self.peers.append(SimPeer(i, signer, behaviour, location))
        registered = {n.hotkey for n in chain.neurons()}
        for p in self.peers:
            if p.hotkey not in registered:
                chain.register(p.hotkey, uid=p.uid)
            chain.commit(p.hotkey, p.location.to_commitment())

    def behaviour_of(self) -> dict[str, str]:
        return {p.hotkey: p.behaviour.name for p in self.peers}

    def publish_window(
        self, window: int, *, model: LlamaModel, base: str, put_start: float,
        last_aggregate: Mapping[str, torch.Tensor] | None,
    ) -> dict[str, bool]:  # fmt: skip
        """Every peer takes its turn (copiers last); returns which peers published."""
        published: dict[str, bytes] = {}
        done: dict[str, bool] = {}
        for p in sorted(self.peers, key=lambda p: (p.behaviour.order, p.uid)):
            ctx = PeerContext(
                window=window, uid=p.uid, signer=p.signer, base=base, model=model,
                published=dict(published), last_aggregate=last_aggregate, tools=self.tools, memory=p.memory,
            )  # fmt: skip
            try:
                sub = p.behaviour.submit(ctx)
            except Exception:  # a simulated peer (maybe a plugin) failing is that peer's miss, not ours
                log.exception("peer_behaviour_failed", uid=p.uid, behaviour=p.behaviour.name)
                sub = None
            done[p.hotkey] = sub is not None
            if sub is None:
                continue
            asyncio.run(
                publish(p.location, object_key(window, p.hotkey), sub.data, mtime=put_start + sub.delay_s)
            )
            published[p.hotkey] = sub.data
        return done
