"""How a call reaches Redis: scripts, gateway, transport; the only wing that knows KEYS/ARGV."""
