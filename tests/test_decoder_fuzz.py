"""A few thousand mutated files in CI time: the decoder answers each with a verdict."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.decoder import Expected, decode_submission
from scoring.types import Reason
from tests.codec_fixtures import SPEC, make_file
from tests.fuzz_decoder import run

GOOD = make_file(9)


def test_random_mutations_never_crash_and_reach_deep_checks() -> None:
    outcomes = run(cases=3_000, seed=1)
    assert sum(outcomes.values()) == 3_000
    assert outcomes["crash"] == 0, outcomes
    # the mutations must exercise more than the container parser
    deep = {
        Reason.BAD_SIGNATURE,
        Reason.INDEX_NOT_INCREASING,
        Reason.BAD_SCALE,
        Reason.NON_FINITE,
        Reason.BAD_LUT,
    }
    assert len(deep & set(outcomes)) >= 3, outcomes
    # and the gauntlet/2 index streams' own checks
    assert {Reason.BAD_RICE_PARAMETER, Reason.BAD_BITSTREAM} <= set(outcomes), outcomes
    assert outcomes[Reason.NOT_SAFETENSORS] > 0


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=4096))
def test_arbitrary_bytes(data: bytes) -> None:
    result = decode_submission(data, SPEC, Expected())
    assert not result.verdict.ok
    assert result.verdict.reason is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, len(GOOD) - 1), st.integers(0, 255))
def test_every_single_byte_change_is_caught(position: int, value: int) -> None:
    data = bytearray(GOOD)
    changed = data[position] != value
    data[position] = value
    result = decode_submission(bytes(data), SPEC, Expected())
    if changed:  # any change to signed bytes or the header must be rejected (signature or structure)
        assert not result.verdict.ok or position < 8 + int.from_bytes(GOOD[:8], "little")
