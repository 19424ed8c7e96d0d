"""The sans-IO core's calls: scripts and contracts, a memory's gateway (with the feature slices'
script calls it mixes in), the closed effect set, steps."""
