"""The chaosbed pytest plugin (placeholder until it lands in this session)."""
