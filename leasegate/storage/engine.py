"""What the actors see of the storage engine: a connection and its rows.

One name for each, so that the code above ``storage`` does not spell the engine
(``sqlite3``) where it only passes a connection to a SQL module or reads a row by
name. Today both are SQLite's own types.
"""

from __future__ import annotations

import sqlite3
from typing import TypeAlias

Connection: TypeAlias = sqlite3.Connection
"""A connection in leasegate's use: explicit transactions, ``?`` placeholders."""

Row: TypeAlias = sqlite3.Row
"""A row, read by column name (``row["status"]``) or index."""
