"""Storage on either engine: SQLite (the default, one file in the data directory) or
PostgreSQL (``postgres/``, several gateways on one database), chosen by the
``database_url`` setting (``database.py``).

One SQL module per actor (``*_sql.py``) runs on both: written against
``engine.Connection`` with ``?`` placeholders, a statement spelled twice
(``engine.Spelled``) only where the engines differ. Connections live on dedicated
threads (``thread.py``); each engine has its migrations and the schema they make
(``sqlite/schema.sql``, ``postgres/schema.sql``). docs/postgresql.md has the decisions.
"""
