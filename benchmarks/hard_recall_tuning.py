"""The tuning split's bank: the only data any default of the dense search, the fusion or the
summary share is chosen on (``benchmarks.bench_hard_recall --tune``).

Written after the held-out bank was frozen, with other names, values, filler and templates;
edit its data (``benchmarks/hard_recall_tuning.json``) freely.
"""

from __future__ import annotations

from benchmarks.datafiles import load
from benchmarks.hard_recall_bank import Bank, bank_from_data

__all__ = ["TUNING"]

TUNING: Bank = bank_from_data(load("hard_recall_tuning"))
