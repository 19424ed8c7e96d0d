"""Archive search: the analyzer that turns text into index terms, and BM25 as a reference."""
