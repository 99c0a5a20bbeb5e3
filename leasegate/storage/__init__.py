"""SQLite storage: connection threads, migrations (the schema they make: sqlite/schema.sql),
one SQL module per actor."""
