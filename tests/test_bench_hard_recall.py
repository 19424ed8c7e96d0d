"""The hard recall benchmark's scoring: all evidence turns must be in the top k, the held-out
split is never tuned on, and the script prints its tables."""

from __future__ import annotations

import importlib.util

import pytest

from benchmarks import bench_hard_recall
from benchmarks.bench_hard_recall import hit
from benchmarks.hard_recall_data import HardQuestion


def test_a_hit_needs_every_evidence_turn() -> None:
    two = HardQuestion("Where does Ana's aunt live?", ("Porto",), 9, "multihop", (4, 9))
    assert hit(two, [9, 1, 4], 3)
    assert not hit(two, [9, 1, 4], 2)
    one = HardQuestion("What did Ana adopt?", ("Rex",), 4, "paraphrase", (4,))
    assert hit(one, [4], 1)
    assert not hit(one, [3, 5], 10)


def test_tuning_refuses_the_heldout_split() -> None:
    with pytest.raises(SystemExit):
        bench_hard_recall.main(["--tune", "--split", "heldout"])


@pytest.mark.skipif(
    importlib.util.find_spec("wordllama") is None,
    reason="the offline embedding model is not installed: pip install 'compozy-memory[embeddings]'",
)
def test_the_script_prints_every_method(capsys: pytest.CaptureFixture[str]) -> None:
    bench_hard_recall.main(["--split", "tuning", "--conversations", "1"])
    out = capsys.readouterr().out
    for method in bench_hard_recall.METHODS:
        assert f"| {method} |" in out
    assert "rerank:" in out
