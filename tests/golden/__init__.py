"""Golden event streams of scripted duplex sessions (the no-behaviour-change guard)."""
