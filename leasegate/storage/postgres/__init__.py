"""PostgreSQL storage: the engine for several gateways on one database.

The same SQL modules run on it through :class:`connection.PgConnection` (SQLite's ``?``
placeholders and row access, a statement's PostgreSQL spelling where the engines
differ); :class:`database.Database` is one connection on one thread per actor, as on
SQLite; ``schema.sql`` is the schema every database has after its migrations
(``migrations.py``). The decisions and their reasons: docs/postgresql.md.
"""
