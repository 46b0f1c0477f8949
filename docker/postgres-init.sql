-- Runs once, on the first start of the compose stack's PostgreSQL (the Airflow database is
-- POSTGRES_DB): the Hive metastore's own database, owned by the same user.
CREATE DATABASE hive_metastore OWNER tidemark;
