"""Fusing BM25 and dense scores over bounded candidates."""

from __future__ import annotations

from dataclasses import replace

import pytest

from compozy_memory._search.fusion import (
    DEFAULT_FUSION,
    Fusion,
    candidate_ids,
    fuse,
    neighbour_lift,
    product_fusion,
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
    plain = fuse(bm25, dense, present, replace(by_rank, neighbour_weight=0.0, before_weight=0.0))
    boosted = fuse(bm25, dense, present, replace(by_rank, neighbour_weight=1.0, before_weight=1.0))
    assert [d for d, _ in top_k(plain, 2)] == [5, 9]
    # Rank fusion (k=2, dense 0.7): 5 -> 1.0, 9 -> 0.645, 6 -> 0.525, 4 -> 0.35; each
    # neighbour of 5 then gains all of 5's score, and the tie between 5 and 6 goes to the newer.
    expected = {5: 1.525, 6: 1.525, 4: 1.35, 9: 0.645, 8: 0.645, 10: 0.645, 7: 0.525, 3: 0.35}
    assert boosted == pytest.approx(expected)
    assert [d for d, _ in top_k(boosted, 3)] == [6, 5, 4]
    by_score = fuse(
        bm25, dense, present, Fusion(method="score", neighbour_weight=0.0, before_weight=0.0)
    )
    assert by_score == pytest.approx(score_fusion(bm25, dense, DEFAULT_FUSION.dense_weight))


def test_product_fusion_lets_the_dense_score_reorder_only_what_bm25_found() -> None:
    # Doc 1 has the query's words (the speaker's name too); 2 and 3 say the same sentence as
    # others, closer in meaning to the query but without the name: a sum of the two scores
    # puts the look-alikes first, a product keeps the lexical winner.
    bm25 = {1: 10.0, 2: 4.0, 3: 4.0, 4: 2.0}
    dense = {1: 0.35, 2: 0.44, 3: 0.44, 4: 0.30, 5: 0.90}
    fused = product_fusion(bm25, dense, 0.75)
    # The dense scores rescaled over BM25's documents: 1 -> 5/14, 2 and 3 -> 1, 4 -> 0.
    expected = {1: 0.25 + 0.75 * 5 / 14, 2: 0.4, 3: 0.4, 4: 0.2 * 0.25, 5: 0.0}
    assert fused == pytest.approx(expected)
    assert [d for d, _ in top_k(fused, 1)] == [1]
    assert [d for d, _ in top_k(score_fusion(bm25, dense, 0.75), 1)] != [1]
    # Without a BM25 score a document gets nothing here (its neighbours may lift it).
    assert product_fusion({}, {7: 0.5}, 0.75) == {7: 0.0}
    assert product_fusion(bm25, dense, 0.0) == pytest.approx(
        {1: 1.0, 2: 0.4, 3: 0.4, 4: 0.2, 5: 0.0}
    )


def test_the_reply_gains_more_than_the_turn_before_the_match() -> None:
    scores = {10: 1.0, 20: 0.5}
    lifted = neighbour_lift(scores, 1.0, 0.3, set(range(1, 30)))
    assert lifted == pytest.approx({9: 0.3, 10: 1.0, 11: 1.0, 19: 0.15, 20: 0.5, 21: 0.5})
    # A turn between two matches takes the larger lift; a missing neighbour is not invented.
    between = neighbour_lift({4: 1.0, 6: 1.0}, 1.0, 0.3, {4, 5, 6})
    assert between == pytest.approx({4: 1.0, 5: 1.0, 6: 1.0})
    assert neighbour_lift(scores, 0.5, 0.5, {9, 10}) == pytest.approx({9: 0.5, 10: 1.0, 20: 0.5})
    # The default fusion lifts the reply by 0.95 of its turn's score (the turn that matched
    # stays first), the turn before by 0.3.
    fused = fuse({10: 4.0}, {10: 0.5, 11: 0.1}, set(range(1, 30)))
    assert [d for d, _ in top_k(fused, 3)] == [10, 11, 9]
    assert fused[11] == pytest.approx(0.95 * fused[10])
    assert fused[9] == pytest.approx(0.3 * fused[10])


@pytest.mark.parametrize(
    "settings",
    [
        {"method": "sum"},
        {"dense_weight": 1.5},
        {"dense_weight": -0.1},
        {"rank_k": 0},
        {"candidates": 0},
        {"neighbour_weight": -1.0},
        {"before_weight": -0.5},
        {"before_weight": float("nan")},
    ],
)
def test_bad_fusion_settings_are_refused(settings: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        Fusion(**settings)  # type: ignore[arg-type]
