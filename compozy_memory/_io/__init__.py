"""The I/O under the core: the async and the sync driver and their middleware (batching,
retry, delivery, WAIT, metrics, telemetry)."""
