"""The round's configuration: everything that decides how a window is fetched and scored."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import SecretBytes

from scoring.consensus import OUTER_LR
from scoring.eval_plan import EvalConfig
from validator.chain.protocol import WindowConfig
from validator.round.check_config import CheckConfig
from validator.round.rating import RankingConfig


@dataclass(frozen=True, slots=True)
class RoundConfig:
    check: CheckConfig
    eval: EvalConfig
    ranking: RankingConfig
    window: WindowConfig
    secret: SecretBytes  # masked in every repr, log and traceback; unwrapped only by `window_seed`
    outer_lr: float = OUTER_LR
    fetch_deadline_s: float = 120.0
    put_window_s: float = 70.0  # how long after a window ends peers may upload its submission
    put_grace_s: float = 5.0
    config_digest: str = "0" * 64
    code_version: str = "dev"
