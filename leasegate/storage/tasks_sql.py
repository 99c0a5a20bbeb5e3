"""SQL of the tasks and workers tables (owned by the task actor)."""

SCHEMA = """
CREATE TABLE tasks_placeholder (x INTEGER);
"""
