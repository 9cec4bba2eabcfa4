import pytest

from validator.demo.fidelity import average_ranks, honest_spearman, spearman
from validator.demo.sim.adversaries import Lapsed
from validator.demo.sim.behaviours import BUILTIN, HONEST_CONTRIBUTION
from validator.demo.sim.context import PeerContext


def test_average_ranks_share_ties() -> None:
    assert average_ranks([3.0, 1.0, 3.0, 2.0]) == [3.5, 1.0, 3.5, 2.0]


def test_spearman_literal_values() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert spearman([1, 2], [5, 5]) is None and spearman([1], [1]) is None


def test_honest_spearman_reads_the_leaderboard() -> None:
    rows = [
        {"behaviour": "honest", "rank": 1},
        {"behaviour": "lazy", "rank": 2},  # adversaries are left out
        {"behaviour": "honest_quarter", "rank": 3},
        {"behaviour": "honest_tenth", "rank": 4},
    ]
    assert honest_spearman(rows) == pytest.approx(1.0)
    rows[0]["rank"], rows[3]["rank"] = 4, 1
    assert honest_spearman(rows) == pytest.approx(-1.0)


def test_graded_behaviours_are_built_in_with_known_contribution() -> None:
    expected = {
        "honest": 1.0,
        "newcomer": 1.0,  # full honest work from the window it joins
        "honest_quarter": 0.25,
        "honest_tenth": 0.1,
        "honest_quarter_pages": 0.25,
    }
    assert expected == HONEST_CONTRIBUTION
    new = {
        "noisy_copy",
        "blend",
        "split",
        "stale_copy",
        "collude",
        "poison",
        "poison_strong",
        "sandbag",
        "sandbag_matched",
        "shrunk",
        "lapsed",
        "frontrun_noisy",
    }
    assert set(HONEST_CONTRIBUTION) | new <= set(BUILTIN)


class _Recorder:
    """What `Lapsed` reads of its context: its uid, window count, pages and the trainer and encoder."""

    def __init__(self) -> None:
        self.uid = 3
        self.memory: dict[str, object] = {}
        self.trained: list[list[int]] = []

    count_window = PeerContext.count_window  # the real counter, over this fake's memory

    def assigned(self, uid: int | None = None) -> list[int]:
        return [uid if uid is not None else self.uid]

    def train(self, pages: list[int] | None = None) -> dict[str, object]:
        self.trained.append(self.assigned() if pages is None else pages)
        return {}

    def encode(self, delta: object) -> bytes:
        return b"file"


def test_lapsed_trains_on_its_own_pages_for_three_windows_then_on_somebody_elses() -> None:
    ctx = _Recorder()
    for _ in range(5):
        assert Lapsed().submit(ctx) is not None  # type: ignore[arg-type]
    assert ctx.trained == [[3], [3], [3], [10_003], [10_003]]
