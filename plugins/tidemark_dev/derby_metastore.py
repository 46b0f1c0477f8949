"""The local deployment's Hive metastore as a service, over the embedded Derby database the
jobs open themselves when it does not run (``$TIDEMARK_HOME/metastore_db``).

Embedded Derby costs every job that registers a partition the Hive client's start and
Derby's boot (~5 CPU-s), and admits one job at a time. This service holds that same database
and answers over Thrift, so a seal registers its hours with a few Thrift calls and starts no
JVM (``tidemark.lazy_session``). It is one database either way: while the service runs, every
process of the home finds it through its pid file (``Settings.from_env``); when it stops, the
jobs open the database embedded again and see the same tables. ``make up`` and ``make demo``
start it; ``tidemark-dev services start derby-metastore`` starts it alone.
"""

from __future__ import annotations

from pathlib import Path

from tidemark.settings import DERBY_METASTORE_SERVICE
from tidemark.tablefs import hadoop_uri
from tidemark_dev.postgres import MetastoreService

HIVE_SITE = """<?xml version="1.0"?>
<!-- written by tidemark-dev services start derby-metastore: a Hive 2.3 Thrift metastore on the
     home's embedded Derby database, the one the jobs open themselves while it does not run -->
<configuration>
{properties}
</configuration>
"""


class DerbyMetastoreService(MetastoreService):
    """The Hive 2.3.10 Thrift metastore of the pyspark wheel's jars on the home's own Derby
    database, on ``TIDEMARK_METASTORE_PORT``: no PostgreSQL needed."""

    name = DERBY_METASTORE_SERVICE

    def hive_site(self) -> dict[str, str]:
        return {
            # what an embedded job opens (spark.metastore_conf): the same database and rules
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.settings.metastore_dir};create=true",
            "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.async.log.enabled": "false",
            "hive.metastore.warehouse.dir": hadoop_uri(self.settings.warehouse),
        }

    @property
    def conf_dir(self) -> Path:
        return self.settings.home / "derby-metastore" / "conf"

    def jvm_properties(self) -> list[str]:
        return [f"-Dderby.system.home={self.settings.home}"]  # derby.log beside the database, as a job's

    def pid_record(self) -> dict[str, str]:
        return {"uri": self.address()}  # how the home's processes find it (Settings.from_env)

    def prepare(self) -> None:
        """hive-site.xml; the database is Derby's to create at the first start."""
        self.write_hive_site(HIVE_SITE)
