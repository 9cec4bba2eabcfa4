"""A weight set fitted to the subnet's limits before it is sent, and checked as the chain will.

The chain takes each weight as a u16 share of the largest, refuses a set naming fewer uids than
MinAllowedWeights, and one whose largest share of the sum is above MaxWeightsLimit (÷ 65535); a set
of the validator's own uid alone (a self-weight) is exempt from both. The SDK clips shares above the
limit, spreading the excess over the others, but onto the limit itself, and the u16 rounding after
it then put sets over the limit (17 % of random padded sets, in review). So the set is clipped here,
a little under the limit, pads go on after the clip, and the weigher checks the u16 values the
chain will see (validator/chain/weight_rules.py `accepted`): the SDK's clip has nothing left to do.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from validator.chain.protocol import WeightLimits
from validator.chain.weight_rules import U16_MAX, quantized, sdk_clipped, within_share

log = structlog.get_logger(__name__)
CLIP_MARGIN = 1e-3  # the clip aims this far under the limit, for the u16 rounding


def clipped(weights: dict[int, float], limits: WeightLimits) -> dict[int, float]:
    """`weights` with no share above the subnet's largest (a little under it), the excess spread
    over the others by the SDK's own clip; too few uids to carry it come back uniform, which
    `within_share` refuses."""
    if limits.max_share >= 1:  # no limit binds (the margin must not make one)
        return weights
    return sdk_clipped(weights, limits.max_share * (1 - CLIP_MARGIN))


def conformed(
    weights: dict[int, float], own: int | None, uids: Sequence[int], limits: WeightLimits
) -> dict[int, float]:
    """`weights` as the chain takes them.

    Nobody paid: the validator's own uid alone (a self-weight). Skipping the set instead left the
    last vector in force, paying peers banned or gone since. The largest shares are clipped under
    the subnet's limit (`clipped`). Fewer uids than the subnet's minimum (counting those the u16
    quantisation keeps): the chain refuses the set, every window, and the last vector again stays;
    so the set is padded with the validator's own uid, then the lowest registered uids, each at the
    least weight the quantisation keeps (1 of 65535 of the largest: nothing anyone could earn by).
    Not when the paid uids cannot carry the limit themselves: spread over pads, the excess would pay
    them for real (the caller withholds the set, `accepted`)."""
    if not weights:
        return {} if own is None else {own: 1.0}
    weights = clipped(weights, limits)
    kept = set(quantized(weights))
    if len(kept) >= limits.min_weights:
        return weights
    if not within_share(weights, limits):
        log.warning(
            "weights_not_padded", named=len(kept), minimum=limits.min_weights, max_share=limits.max_share
        )
        return weights
    top = max(weights.values())
    spare = [u for u in dict.fromkeys([*([] if own is None else [own]), *sorted(uids)]) if u not in kept]
    return weights | {u: top / U16_MAX for u in spare[: limits.min_weights - len(kept)]}
