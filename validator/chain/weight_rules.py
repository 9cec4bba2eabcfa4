"""The chain's rules for a weight set, on the u16 values it stores.

The SDK sends each weight as a u16 share of the largest (zeros dropped). The chain refuses a set
naming fewer uids than MinAllowedWeights, and one whose largest value is above MaxWeightsLimit of
their sum (in 65535ths); a set of the validator's own uid alone (a self-weight) is exempt from both.
The weigher checks a set with these before sending it (validator/round/weight_limits.py), and the
local chain refuses with them what a real one would (validator/chain/local.py).
"""

from __future__ import annotations

from validator.chain.protocol import WeightLimits

U16_MAX = 65535  # the chain stores each weight as a u16 share of the largest


def quantized(weights: dict[int, float]) -> dict[int, int]:
    """The u16 values the SDK sends: each weight over the largest, rounded; zeros dropped."""
    top = max(weights.values(), default=0.0)
    if not top > 0:
        return {}
    return {u: q for u, w in weights.items() if (q := round(w / top * U16_MAX)) >= 1}


def within_share(weights: dict[int, float], limits: WeightLimits) -> bool:
    """No uid above the subnet's largest share, on the values the chain sees."""
    values = quantized(weights)
    limit = round(limits.max_share * U16_MAX)
    return bool(values) and max(values.values()) * U16_MAX <= limit * sum(values.values())


def accepted(weights: dict[int, float], limits: WeightLimits, own: int | None) -> bool:
    """Whether the chain takes the set: a self-weight, or enough uids none above the largest share."""
    values = quantized(weights)
    if own is not None and set(values) == {own}:
        return True
    return len(values) >= limits.min_weights and within_share(weights, limits)


def sdk_clipped(weights: dict[int, float], max_share: float) -> dict[int, float]:
    """`weights` through the SDK's own clip to `max_share` (it spreads what it clips over the others,
    evenly when too few are named); unchanged when nothing binds."""
    if max_share >= 1 or not sum(weights.values()) > 0:
        return weights
    from bittensor.intents.weights import clip_to_max_weight  # imported only when a limit binds

    return dict(zip(weights, clip_to_max_weight(list(weights.values()), max_share), strict=True))
