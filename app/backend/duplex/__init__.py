"""Duplex sessions: the session manager (admission, reaping) and the session owner with its
collaborators (turn tracking, reply running, playback clock, history, context window)."""
