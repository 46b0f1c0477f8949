"""Groups of tables: many tables, one Spark application per run (``group:`` in a table YAML).

Each table of a group keeps its own plan, commit log, lease and exactly-once guarantees; the
group only shares the Spark session. ``members``: which tables form a group; ``runner``: one
job body over every table, each isolated from the others; ``outcomes``: what each table's
part of a group run did, and what its own Airflow task does about it; ``barrier``: a group's
hour announced once every table sealed it.
"""
