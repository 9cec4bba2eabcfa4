import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from scoring.aggregation import aggregate_into, clipped_values
from scoring.types import SparseParam

torch.set_num_threads(1)


def sp(shape: tuple[int, ...], idx: list[int], vals: list[float]) -> SparseParam:
    return SparseParam(shape, torch.tensor(idx, dtype=torch.int64), torch.tensor(vals, dtype=torch.float32))


def test_literal_step_with_clipping() -> None:
    w = torch.nn.Parameter(torch.zeros(2, 2))
    a = {"w": sp((2, 2), [0, 3], [3.0, 4.0])}  # norm 5, clipped to 1: (0.6, 0.8)
    b = {"w": sp((2, 2), [0, 1], [0.5, 0.5])}  # norm 0.707, below the reference: unchanged
    norms = aggregate_into({"w": w}, [a, b], {"w": 1.0}, outer_lr=0.4)
    mean = torch.tensor([(0.6 + 0.5) / 2, 0.25, 0.0, 0.4])
    assert torch.allclose(w.detach().view(-1), -0.4 * mean)
    assert norms["w"] == pytest.approx(float(mean.norm()))


def test_no_updates_leaves_model_unchanged() -> None:
    w = torch.ones(3)
    assert aggregate_into({"w": w}, [], {"w": 1.0}) == {}
    assert torch.equal(w, torch.ones(3))


def test_clipped_values_are_the_evaluated_values() -> None:
    p = sp((4,), [1, 2], [3.0, 4.0])
    assert clipped_values(p, 1.0) is p.values
    assert torch.equal(clipped_values(p, 0.2), p.values * 0.2)


def test_mismatched_shape_rejected() -> None:
    with pytest.raises(ValueError):
        aggregate_into({"w": torch.zeros(5)}, [{"w": sp((4,), [0], [1.0])}], {})


def _update(draw: st.DrawFn, n: int) -> dict[str, SparseParam]:
    idx = sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n)))
    vals = draw(st.lists(st.floats(-10, 10, width=32), min_size=len(idx), max_size=len(idx)))
    return {"w": sp((n,), idx, vals)}


@st.composite
def updates(draw: st.DrawFn) -> list[dict[str, SparseParam]]:
    return [_update(draw, 16) for _ in range(draw(st.integers(1, 5)))]


@settings(max_examples=60, deadline=None)
@given(updates(), st.integers(1, 6))
def test_identical_updates_average_to_one(ups: list[dict[str, SparseParam]], r: int) -> None:
    one, many = torch.zeros(16), torch.zeros(16)
    aggregate_into({"w": one}, [ups[0]], {"w": 2.0})
    aggregate_into({"w": many}, [ups[0]] * r, {"w": 2.0})
    assert torch.allclose(one, many, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(updates(), st.data())
def test_one_peer_moves_the_mean_by_at_most_its_clipped_norm_over_r(
    ups: list[dict[str, SparseParam]], data: st.DataObject
) -> None:
    ref = {"w": 1.5}
    k = data.draw(st.integers(0, len(ups) - 1))
    replaced = list(ups)
    replaced[k] = {"w": sp((16,), [0], [0.0])}
    with_k, without_k = torch.zeros(16), torch.zeros(16)
    aggregate_into({"w": with_k}, ups, ref, outer_lr=1.0)
    aggregate_into({"w": without_k}, replaced, ref, outer_lr=1.0)
    clipped_norm = min(ups[k]["w"].norm(), ref["w"])
    assert float((with_k - without_k).norm()) <= clipped_norm / len(ups) + 1e-5
