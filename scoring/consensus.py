"""Defaults that every validator of a subnet must share to compute the same windows (deploy/README.md)
and that more than one layer states: named once here, so the settings, the round and the scoring
functions cannot drift apart. Kept free of heavy imports: the process settings read it at start-up."""

from __future__ import annotations

from typing import Final

# The global model's outer step, θ ← θ − outer_lr · mean (scoring/aggregation.py); LossScore evaluates
# each update at eval_lr_factor × outer_lr, so both must use the same value.
OUTER_LR: Final = 0.4
