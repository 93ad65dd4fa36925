"""End-of-turn detection."""
