"""Fusing BM25 and dense scores over bounded candidates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compozy_memory._search.fusion import (
    DEFAULT_FUSION,
    Fusion,
    candidate_ids,
    fuse,
    rank_fusion,
    score_fusion,
)
from compozy_memory._search.ranking import top_k
from compozy_memory.errors import ConfigurationError


def test_candidates_are_the_best_bm25_hits_and_their_neighbours() -> None:
    bm25 = {10: 5.0, 20: 4.0, 30: 3.0, 40: 0.5}
    present = set(range(1, 41))
    assert candidate_ids(bm25, 2, present) == {9, 10, 11, 19, 20, 21}
    # Missing neighbours are not invented; extra ids (the live window) join as they are.
    assert candidate_ids(bm25, 1, {10, 11}, extra=[99]) == {10, 11, 99}
    assert candidate_ids({}, 5, present) == set()
    assert candidate_ids(bm25, 1, lambda i: i == 9) == {9, 10}


def test_score_fusion_mixes_normalised_scores() -> None:
    bm25 = {1: 10.0, 2: 5.0}
    dense = {2: 0.9, 3: 0.5, 1: 0.1}
    fused = score_fusion(bm25, dense, 0.5)
    assert fused == pytest.approx({1: 0.5, 2: 0.75, 3: 0.25})
    assert score_fusion(bm25, dense, 0.0) == pytest.approx({1: 1.0, 2: 0.5, 3: 0.0})
    assert score_fusion({}, {}, 0.5) == {}


def test_rank_fusion_counts_ranks_not_scores() -> None:
    bm25 = {1: 100.0, 2: 1.0}
    dense = {2: 0.31, 3: 0.30}
    fused = rank_fusion(bm25, dense, 0.5, k=2)
    # Doc 2 is second lexically and first densely: ahead of doc 1 however large its BM25.
    assert fused == pytest.approx({1: 0.5, 2: 0.375 + 0.5, 3: 0.375})
    assert max(rank_fusion({7: 1.0}, {7: 1.0}, 0.3, k=60).values()) == pytest.approx(1.0)


def test_fuse_applies_the_neighbour_boost_to_the_fused_score() -> None:
    # The turn that matched (5) asked the question; its reply (6) holds the answer.
    bm25 = {5: 4.0, 9: 3.0}
    dense = {5: 0.8, 6: 0.2, 9: 0.1, 4: 0.0}
    present = set(range(1, 12))
    by_rank = Fusion(method="rank", dense_weight=0.7, rank_k=2)
    plain = fuse(bm25, dense, present, replace(by_rank, neighbour_weight=0.0))
    boosted = fuse(bm25, dense, present, replace(by_rank, neighbour_weight=1.0))
    assert [d for d, _ in top_k(plain, 2)] == [5, 9]
    # Rank fusion (k=2, dense 0.7): 5 -> 1.0, 9 -> 0.645, 6 -> 0.525, 4 -> 0.35; each
    # neighbour of 5 then gains all of 5's score, and the tie between 5 and 6 goes to the newer.
    expected = {5: 1.525, 6: 1.525, 4: 1.35, 9: 0.645, 8: 0.645, 10: 0.645, 7: 0.525, 3: 0.35}
    assert boosted == pytest.approx(expected)
    assert [d for d, _ in top_k(boosted, 3)] == [6, 5, 4]
    by_score = fuse(bm25, dense, present, Fusion(method="score", neighbour_weight=0.0))
    assert by_score == pytest.approx(score_fusion(bm25, dense, DEFAULT_FUSION.dense_weight))


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "sum"},
        {"dense_weight": 1.5},
        {"dense_weight": -0.1},
        {"rank_k": 0},
        {"candidates": 0},
        {"neighbour_weight": -1.0},
    ],
)
def test_bad_fusion_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Fusion(**settings)  # type: ignore[arg-type]
