"""In-memory domain types shared by the scoring modules and the round loop.

These are plain values: no database rows (storage/models.py) and no API schemas (api/schemas.py).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import torch

# name -> shape, in the model's parameter order.
ParamSpec = Mapping[str, tuple[int, ...]]


class Reason:
    """Stable, machine-readable reason codes for a rejected or missing submission (DESIGN.md §5)."""

    TOO_LARGE: Final = "too_large"
    NOT_SAFETENSORS: Final = "not_safetensors"
    BAD_HEADER: Final = "bad_header"
    BAD_METADATA: Final = "bad_metadata"
    WRONG_WINDOW: Final = "wrong_window"
    WRONG_HOTKEY: Final = "wrong_hotkey"
    WRONG_UID: Final = "wrong_uid"
    BAD_SIGNATURE: Final = "bad_signature"
    STALE_BASE: Final = "stale_base"
    MISSING_TENSOR: Final = "missing_tensor"
    EXTRA_TENSOR: Final = "extra_tensor"
    BAD_DTYPE: Final = "bad_dtype"
    BAD_SHAPE: Final = "bad_shape"
    BAD_PADDING: Final = "bad_padding"
    BAD_RICE_PARAMETER: Final = "bad_rice_parameter"  # gauntlet/2: an index stream's k outside [0, 11]
    BAD_BITSTREAM: Final = "bad_bitstream"  # gauntlet/2: an index stream with the wrong number of codes
    INDEX_OUT_OF_RANGE: Final = "index_out_of_range"
    INDEX_NOT_INCREASING: Final = "index_not_increasing"
    BAD_SCALE: Final = "bad_scale"
    BAD_LUT: Final = "bad_lut"
    NON_FINITE: Final = "non_finite"
    NORM_OUTLIER: Final = "norm_outlier"
    DUPLICATE_PAYLOAD: Final = "duplicate_payload"
    RECYCLED: Final = "recycled"  # an earlier window's update under a new digest (scoring/recycling.py)
    COPY: Final = "copy"
    ECHO: Final = "echo"  # mostly the mean of the window's other updates (scoring/echo.py)
    LATE: Final = "late"
    EARLY: Final = "early"
    MISSING: Final = "missing"
    FETCH_FAILED: Final = "fetch_failed"
    NO_LOCATION: Final = "no_location"
    BAD_LOCATION: Final = "bad_location"
    ZERO_UPDATE: Final = "zero_update"  # an update with (near) zero norm: it would capture the clip reference
    NON_FINITE_LOSS: Final = "non_finite_loss"  # the update took the model's loss to NaN or infinity
    INTERNAL_ERROR: Final = "internal_error"  # judging this peer raised; the window goes on without it
    NOT_ATTEMPTED: Final = "not_attempted"  # the window's fetch budget ran out first: not penalised


@dataclass(frozen=True, slots=True)
class Verdict:
    """Outcome of a check: ok, or a stable reason code plus a human-readable detail."""

    ok: bool
    reason: str | None = None
    detail: str = ""

    @staticmethod
    def accept(detail: str = "") -> Verdict:
        return Verdict(True, None, detail)

    @staticmethod
    def reject(reason: str, detail: str) -> Verdict:
        return Verdict(False, reason, detail)


@dataclass(frozen=True, slots=True)
class SparseParam:
    """One parameter's decoded update: flat row-major coordinates and their values.

    `indices` is int64 of shape (K,), strictly increasing within each chunk (so unique overall);
    `values` is float32 of shape (K,). Ready for `flat.index_add_(0, indices, values)`.
    """

    shape: tuple[int, ...]
    indices: torch.Tensor
    values: torch.Tensor

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def dense(self) -> torch.Tensor:
        """Materialize the dense float32 update of this one parameter (zeros where nothing was sent)."""
        out = torch.zeros(self.numel, dtype=torch.float32)
        out.index_put_((self.indices,), self.values)
        return out.view(self.shape)

    def norm(self) -> float:
        return float(torch.linalg.vector_norm(self.values))


class NormedParams(Mapping[str, SparseParam]):
    """An update's parameters that know their norms without being decoded: a stored submission read
    back one parameter at a time (scoring/lazy_update.py). Norms and clip factors come from here."""

    @abstractmethod
    def norms(self) -> Mapping[str, float]: ...


def param_norms(params: Mapping[str, SparseParam]) -> dict[str, float]:
    """Each parameter's update norm: recorded when stored, else computed from the values."""
    if isinstance(params, NormedParams):
        return dict(params.norms())
    return {name: p.norm() for name, p in params.items()}


@dataclass(frozen=True, slots=True)
class SubmissionMeta:
    """The signed identity of a submission (safetensors metadata, DESIGN.md §4)."""

    window: int
    uid: int
    hotkey: str
    base: str
    signature: str


@dataclass(frozen=True, slots=True)
class SparseUpdate:
    """A whole decoded submission: one SparseParam per model parameter, plus its identity.

    `digest` is the payload digest of §4.4 (lowercase hex SHA-256): equal digests mean equal bytes;
    `decoded` the digest of its decoded values (scoring/decoded_digest.py), None where not computed.
    """

    meta: SubmissionMeta
    digest: str
    params: Mapping[str, SparseParam] = field(default_factory=dict)
    nbytes: int = 0
    decoded: str | None = None

    def norms(self) -> dict[str, float]:
        return param_norms(self.params)


@dataclass(frozen=True, slots=True)
class DecodeResult:
    """Either an update (verdict ok) or a rejection verdict with update None."""

    verdict: Verdict
    update: SparseUpdate | None = None
    meta: SubmissionMeta | None = None
