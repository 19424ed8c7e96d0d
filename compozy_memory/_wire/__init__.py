"""The sans-IO core's calls: scripts and contracts, the gateways, the closed effect set,
steps; the only wing that knows KEYS/ARGV."""
