"""Actors: one per module, each owning its state and its tables."""
