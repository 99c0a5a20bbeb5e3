"""The HTTP surface: routes translate requests into actor messages."""
