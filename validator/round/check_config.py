"""The integrity checks' settings (DESIGN.md §5): copies, norms, the clip reference, recycling, echoes."""

from __future__ import annotations

from dataclasses import dataclass

from scoring.uniqueness import UniquenessConfig
from scoring.wire import CodecConfig


@dataclass(frozen=True, slots=True)
class CheckConfig:
    codec: CodecConfig = CodecConfig()
    uniqueness: UniquenessConfig = UniquenessConfig()
    norm_outlier_factor: float = 10.0  # reject an update whose norm exceeds this × the window median
    # the clip reference: this quantile of the proven peers' per-parameter norms (scoring/clipping.py);
    # 0.5 is DESIGN.md's median, which let weak honest peers shrink every full update
    clip_quantile: float = 0.75
    # ... at most this × the median: a quarter of the proven peers with inflated norms would otherwise
    # unclip their own updates up to the norm outlier limit (selection reads masses relative to the
    # window's typical one, so the lift does not scale the honest weights either)
    clip_cap: float = 2.0
    # An update (or one parameter of it) with a total norm at or below this is empty: counted in the
    # clip reference, a crowd of empty sybils would make it 0 and clip every honest update to nothing.
    zero_norm: float = 1e-12
    # updates of this many earlier windows that a submission must not repeat (scoring/recycling.py)
    recycled_windows: int = 2
    # an update whose own share beyond the others' consensus is under this × the proven peers'
    # median is an echo of the window (scoring/echo.py); 0 turns the check off
    echo_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.norm_outlier_factor <= 1.0:
            raise ValueError("norm_outlier_factor must be > 1")
        if not 0.5 <= self.clip_quantile < 1.0:  # 1 would hand the reference to the largest update
            raise ValueError("clip_quantile must be in [0.5, 1)")
        if self.clip_cap < 1.0:
            raise ValueError("clip_cap must be >= 1 (× the median norm)")
        if not 0.0 <= self.zero_norm < 1e-3:
            raise ValueError("zero_norm must be in [0, 1e-3)")
        if self.recycled_windows < 0:
            raise ValueError("recycled_windows must be >= 0")
        if not 0.0 <= self.echo_ratio < 1.0:
            raise ValueError("echo_ratio must be in [0, 1)")
