"""Topic families: one YAML describes every table of the topics whose names match a pattern
(``<conf dir>/families/<family>.yaml``). A discovery task lists the broker's topics and
records the family's members in the state store (``catalog.family_members``); the DAG files
and the jobs read that record, never the broker, to know a family's tables
(``catalog.families``). Here: the discovery and a retired member's end."""
