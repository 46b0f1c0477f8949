"""The operators of tidemark's Spark tasks: spark-submit in the venv's own environment, and
with the bootstrap source's credentials.

The environment (the venv's interpreter and Spark home) is set in ``execute``, from the
worker's own settings, so a worker whose PATH lacks the venv still runs the right Spark. The
credentials are looked up in ``execute`` (after templates were rendered and stored), from
the Airflow connection the trigger form names, masked in the task log, and handed to the job
through its environment only: never a param, an argument or a rendered field.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator  # noqa: TID253

from tidemark.airflow.links import BatchReconciliationLink, HourDataDocsLink
from tidemark.snapshot.sources import PASSWORD_ENV, USER_ENV
from tidemark.table import Table

if TYPE_CHECKING:
    from tidemark.jobs import SparkJob

log = logging.getLogger(__name__)


class TidemarkSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator whose spark-submit runs with the venv's interpreter and Spark home
    (``jobs.spark_environment``), whatever the worker's PATH holds."""

    def execute(self, context: Any) -> Any:
        from tidemark.jobs import SPARK_ENVIRONMENT, spark_environment
        from tidemark.settings import Settings

        settings = Settings.from_env()
        full = spark_environment(settings)
        self.env_vars = {**{k: full[k] for k in SPARK_ENVIRONMENT}, **(self.env_vars or {})}
        self._add_launch_conf(settings)
        self._log_jvm_to_file(settings, context)
        log.info(
            "spark-submit with SPARK_HOME=%s PYSPARK_PYTHON=%s", full["SPARK_HOME"], full["PYSPARK_PYTHON"]
        )
        try:
            return super().execute(context)
        except Exception as exc:
            self._fail_for_good_if_decided(exc)
            raise

    def _get_hook(self) -> Any:
        """The provider's hook, whose task log lines keep the level they carry."""
        from tidemark.airflow.spark_log import LeveledLines

        hook = super()._get_hook()
        hook._log = LeveledLines(hook.log)  # type: ignore[assignment]  # a Logger in all but name
        self._launch_in_python(hook)
        return hook

    def _launch_in_python(self, hook: Any) -> None:
        """A job whose session starts on first use (``jobs.LAZY_JOBS``: the seal) runs as a
        Python process, the spark-submit options the hook built handed to PySpark
        (``jobs.python_launch``): a seal that needs no Spark then starts no JVM. The hook
        still runs, logs and stops the process, and reads its exit status."""
        from tidemark.jobs import LAZY_JOBS, SUBMIT_ARGS_ENV, python_launch
        from tidemark.settings import Settings

        job = self._spark_job()
        if job is None or job.job not in LAZY_JOBS:
            return
        build = hook._build_spark_submit_command
        python = Settings.from_env().python

        def launched(application: str) -> list[str]:
            command: list[str] = build(application)
            launch = python_launch(command, application, python)
            if launch is None:
                return command
            hook._env = {**(hook._env or {}), SUBMIT_ARGS_ENV: launch[1]}
            log.info("%s runs as a Python process; Spark starts only if it needs it", job.name)
            return launch[0]

        hook._build_spark_submit_command = launched

    def _log_jvm_to_file(self, settings: Any, context: Any) -> None:
        """The driver JVM's INFO lines (Spark, Hive and Derby starting) go to a file of this
        task try; the task log keeps WARN and above (``spark_log``)."""
        from tidemark.airflow.spark_log import jvm_log_file, jvm_log_options
        from tidemark.jobs import merged_conf

        ti = context["ti"]
        log_file = jvm_log_file(settings.log_dir, ti.dag_id, ti.run_id, ti.task_id, ti.try_number)
        options = jvm_log_options(settings.home / "conf", log_file)
        current = (self.conf or {}).get("spark.driver.extraJavaOptions", "").split()
        kept = [
            o for o in current if not o.startswith(("-Dlog4j2.configurationFile=", "-Dtidemark.jvm.log="))
        ]
        self.conf = merged_conf(
            self.conf or {}, {"spark.driver.extraJavaOptions": " ".join([*kept, options])}
        )
        log.info(
            "the Spark driver's INFO lines (JVM start-up, Hive, Derby) go to %s; WARN and above come here",
            log_file,
        )

    def _fail_for_good_if_decided(self, exc: Exception) -> None:
        """A job that exited with ``NO_RETRY_EXIT_CODE`` met an error a retry cannot change (a
        config, a decision, a schema): the task fails without its retries."""
        from airflow.sdk.exceptions import AirflowFailException

        from tidemark.jobs import NO_RETRY_EXIT_CODE

        process = getattr(self._hook, "_submit_sp", None)
        if process is not None and process.returncode == NO_RETRY_EXIT_CODE:
            raise AirflowFailException(
                f"{self.task_id}: the job stopped on an error a retry cannot change (the task log shows it, with "
                "its way out); not retried"
            ) from exc

    def _add_launch_conf(self, settings: Any) -> None:
        """The table's (or group's) jars and conf, read when the task runs (not when the DAG
        file is parsed): ``SparkJob.launch_conf``."""
        from tidemark.jobs import DRIVER_CLASS_PATH, joined_class_path, merged_conf
        from tidemark.spark import with_class_archive

        job = self._spark_job()
        if job is None:
            return
        launch = job.launch_conf(settings)
        if launch:
            self.driver_class_path = joined_class_path(
                self.driver_class_path, launch.pop(DRIVER_CLASS_PATH, "")
            )
            self.conf = merged_conf(self.conf or {}, launch)
            options = self.conf.get("spark.driver.extraJavaOptions", "")  # its class path's archive
            self.conf["spark.driver.extraJavaOptions"] = with_class_archive(
                options, settings, self.driver_class_path
            )
            log.info("spark-submit with the jars of %s: %s", job.table, launch.get("spark.jars", "none"))

    def _spark_job(self) -> SparkJob | None:
        """The ``jobs.SparkJob`` this task submits (from its application and arguments)."""
        from tidemark.jobs import SparkJob

        return SparkJob.from_arguments(self.application, self.application_args or [])

    def lineage_of(self) -> tuple[str, list[str]]:
        """The job and the tables whose records say what this task read and wrote."""
        job = self._spark_job()
        return (job.job, [job.table]) if job is not None else ("", [])

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """What the job read and wrote, from the records it left in state (OpenLineage
        provider hook; ``tidemark.observe.lineage``)."""
        from tidemark.catalog import load_table
        from tidemark.observe.lineage import JobLineage, job_lineage
        from tidemark.settings import Settings

        settings = Settings.from_env()
        job, tables = self.lineage_of()
        parts = [job_lineage(job, load_table(t, settings), settings, task_instance.run_id) for t in tables]
        inputs = tuple(d for p in parts for d in p.inputs)
        return openlineage_of(JobLineage(inputs, tuple(d for p in parts for d in p.outputs)))


class HourWriterSparkSubmitOperator(TidemarkSparkSubmitOperator):
    """A seal or a rebuild: its task instance links the Data Docs of the newest hour it wrote."""

    operator_extra_links = (HourDataDocsLink(),)


class BatchWriterSparkSubmitOperator(TidemarkSparkSubmitOperator):
    """The ingest DAG's dump: skipped (not failed) while the table is written by the stream
    (``tidemark switch``), so a scheduled run neither competes with it nor turns red. Its task
    instance links the batch's row on the health page."""

    operator_extra_links = (BatchReconciliationLink(),)

    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

        from tidemark.ingest.resolve import decision_problems
        from tidemark.settings import Settings

        problems = decision_problems(list(self.application_args or []))  # the trigger form's, before Spark
        if problems:
            raise AirflowFailException("the run's params do not go together: " + "; ".join(problems))
        refusal = Table.state_of(Settings.from_env().state_location, self.table).writer.batch_refusal()
        if refusal is not None:
            raise AirflowSkipException(refusal)
        return super().execute(context)


class GroupSparkSubmitOperator(TidemarkSparkSubmitOperator):
    """A group's job (``spark_jobs/group.py``): one Spark application for every table of the
    group. It succeeds although tables failed; each table's own task reports its part."""

    def __init__(self, *, group: str, job: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.group, self.job = group, job

    def lineage_of(self) -> tuple[str, list[str]]:
        from tidemark.group.members import group_members
        from tidemark.settings import Settings

        return self.job, [c.table for c in group_members(self.group, Settings.from_env())]


class GroupTableOperator(GroupSparkSubmitOperator):
    """One table's part of a group job (mapped over the group's tables): the first try reports
    what the group job recorded for the table, or fails with the table's own error; a retry or
    a clear runs the job for this table alone, same run id (``tidemark.group.outcomes``)."""

    template_fields: Sequence[str] = (*GroupSparkSubmitOperator.template_fields, "table")

    def __init__(self, *, table: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.table = table

    def lineage_of(self) -> tuple[str, list[str]]:
        return self.job, [self.table]

    def execute(self, context: Any) -> Any:
        from airflow.sdk.exceptions import AirflowSkipException

        from tidemark.errors import GroupTableFailedError
        from tidemark.group.outcomes import Step, next_step, read_outcome
        from tidemark.settings import Settings

        state = Settings.from_env().state_location
        run_id = context["run_id"]
        outcome = read_outcome(state, self.table, self.job, run_id)
        step = next_step(outcome, context["ti"].try_number)
        if step is Step.RUN_ALONE:
            why = "no record of the group job" if outcome is None else f"try {context['ti'].try_number}"
            log.info("%s: running the %s of run %s alone (%s)", self.table, self.job, run_id, why)
            self.application_args = [*(self.application_args or []), "--tables", self.table]
            super().execute(context)
            outcome = read_outcome(state, self.table, self.job, run_id)
            step = next_step(outcome, 1)
        if outcome is None or step is Step.RUN_ALONE:
            raise GroupTableFailedError(self.group, self.table, self.job, run_id, "the job left no record")
        if step is Step.SKIP:
            raise AirflowSkipException(f"{self.table}: {outcome.detail}")
        if step is Step.FAIL:
            raise GroupTableFailedError(
                self.group, self.table, self.job, run_id, f"{outcome.error_type}: {outcome.detail}"
            )
        log.info("%s: the %s of run %s: %s", self.table, self.job, run_id, outcome.result)
        return {"status": outcome.status, "seconds": outcome.seconds, **outcome.result}


class SourceCredentialsSparkSubmitOperator(TidemarkSparkSubmitOperator):
    """SparkSubmitOperator that passes ``login``/``password`` of ``source_conn_id`` as
    ``TIDEMARK_SOURCE_USER``/``TIDEMARK_SOURCE_PASSWORD``. A missing connection is not an
    error: file sources need none, and a worker may provide the variables itself."""

    template_fields: Sequence[str] = (*TidemarkSparkSubmitOperator.template_fields, "source_conn_id")

    def __init__(self, *, source_conn_id: str = "", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_conn_id = source_conn_id

    def execute(self, context: Any) -> Any:
        from airflow.sdk import BaseHook
        from airflow.sdk.exceptions import AirflowNotFoundException
        from airflow.sdk.log import mask_secret

        if self.source_conn_id:
            try:
                conn = BaseHook.get_connection(self.source_conn_id)
            except AirflowNotFoundException:
                log.info(
                    "no Airflow connection %r: the job reads %s/%s from the worker's environment, if set",
                    self.source_conn_id,
                    USER_ENV,
                    PASSWORD_ENV,
                )
            else:
                secret = {USER_ENV: conn.login or "", PASSWORD_ENV: conn.password or ""}
                if conn.password:
                    mask_secret(conn.password)
                self.env_vars = {**(self.env_vars or {}), **{k: v for k, v in secret.items() if v}}
                log.info("source credentials from connection %r (user %s)", self.source_conn_id, conn.login)
        return super().execute(context)


@functools.cache
def _kafka_offsets_facet() -> Any:
    """The ``tidemark_kafkaOffsets`` input facet class (defined once, on first use: the
    OpenLineage client is imported only where lineage is emitted)."""
    import attr
    from openlineage.client.facet_v2 import InputDatasetFacet

    @attr.define
    class KafkaOffsetsInputDatasetFacet(InputDatasetFacet):
        """Offsets [start, end) read per MQ partition."""

        ranges: list[dict[str, int]]

        @staticmethod
        def _get_schema() -> str:
            return "https://github.com/tidemark/tidemark/blob/main/docs/operations.md#lineage"

    return KafkaOffsetsInputDatasetFacet


def _partitions(specs: Any) -> Any:
    from openlineage.client.generated.base_subset_dataset import Partition, PartitionSubsetCondition

    return PartitionSubsetCondition(partitions=[Partition(dimensions=dict(s)) for s in specs])


def _schema_facets(dataset: Any) -> dict[str, Any]:
    from airflow.providers.common.compat.openlineage.facet import SchemaDatasetFacet, SchemaDatasetFacetFields

    if not dataset.columns:
        return {}
    fields = [SchemaDatasetFacetFields(name=n, type=t) for n, t in dataset.columns]
    return {"schema": SchemaDatasetFacet(fields=fields)}


def openlineage_of(lineage: Any) -> Any:
    """An ``OperatorLineage`` from a :class:`tidemark.observe.lineage.JobLineage`: the
    partitions read or written as subset facets (OpenLineage's partition condition), the
    Kafka offset ranges as a ``tidemark_kafkaOffsets`` input facet, the columns as a schema
    facet."""
    from airflow.providers.common.compat.openlineage.facet import InputDataset, OutputDataset
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.generated.base_subset_dataset import (
        InputSubsetInputDatasetFacet,
        OutputSubsetOutputDatasetFacet,
    )

    inputs = []
    for d in lineage.inputs:
        extra: dict[str, Any] = {}
        if d.offsets:
            extra["tidemark_kafkaOffsets"] = _kafka_offsets_facet()(ranges=[dict(r) for r in d.offsets])
        if d.partitions:
            extra["subset"] = InputSubsetInputDatasetFacet(inputCondition=_partitions(d.partitions))
        inputs.append(
            InputDataset(namespace=d.namespace, name=d.name, inputFacets=extra, facets=_schema_facets(d))
        )
    outputs = [
        OutputDataset(
            namespace=d.namespace,
            name=d.name,
            facets=_schema_facets(d),
            outputFacets={"subset": OutputSubsetOutputDatasetFacet(outputCondition=_partitions(d.partitions))}
            if d.partitions
            else {},
        )
        for d in lineage.outputs
    ]
    return OperatorLineage(inputs=inputs, outputs=outputs)
