"""End-of-turn detection: the turn-detector interface and its implementations, chosen by
``turn_policy.detector`` in the deploy config."""
