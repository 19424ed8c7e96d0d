"""One memory and its operations, thin over the gateway."""
