"""What the LLM sees: the wire formats agents send, and the tools that search the archive."""
