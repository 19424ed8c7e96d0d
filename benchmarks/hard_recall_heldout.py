"""The held-out split's bank: FROZEN. Written before the tuning bank and before any tuning.

Nothing is tuned on this split: ``benchmarks.bench_hard_recall --tune`` refuses it, every
default (fusion weights, candidate counts, the summary share) is chosen on the tuning split
and only then measured here, and ``tests/test_hard_recall_data.py`` checks the SHA-256 of its
data (``benchmarks/hard_recall_heldout.json``) so an edit cannot pass unnoticed. Its names,
values, filler and templates share nothing on purpose with the tuning bank's.
"""

from __future__ import annotations

from benchmarks.datafiles import load
from benchmarks.hard_recall_bank import Bank, bank_from_data

__all__ = ["HELDOUT"]

HELDOUT: Bank = bank_from_data(load("hard_recall_heldout"))
