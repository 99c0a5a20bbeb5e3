"""SQLite storage: connection threads, migrations, one SQL module per actor."""
