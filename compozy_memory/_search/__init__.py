"""Archive search: the analyzer that turns text into index terms, and the ranking of what the
index returns (neighbour boost, fusion with dense scores)."""
