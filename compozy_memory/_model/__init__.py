"""Plain data: messages, keys, limits, policies, token counts and result types."""
