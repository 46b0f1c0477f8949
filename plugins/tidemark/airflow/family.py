"""The discovery DAG of a topic family (see ``tidemark.family``)."""

from __future__ import annotations

from functools import partial
from typing import Any

from tidemark.airflow.common import START_DATE, dry_run_param
from tidemark.catalog.families import Family
from tidemark.settings import Settings


def discovery_dag(family: Family, members: list[str], settings: Settings) -> Any:
    """``tidemark_discover_<family>``: list the broker's topics, record the family's members."""
    from datetime import timedelta

    from airflow.sdk import DAG, task

    from tidemark.observe.alerts import record_group_failure

    with DAG(
        dag_id=f"tidemark_discover_{family.name}",
        description=f"Find the topics matching {family.pattern.pattern} and make each a table",
        schedule=family.discovery_schedule,
        start_date=START_DATE,
        catchup=False,
        max_active_runs=1,
        default_args={
            "owner": str(family.template.get("owner", "data-eng")),
            "retries": 2,
            "retry_delay": timedelta(minutes=1),
            "on_failure_callback": partial(record_group_failure, members),
        },
        tags=["tidemark", "family"],
        doc_md=f"""
### Discover the topics of family `{family.name}`
Lists the broker's topics; each one matching `{family.pattern.pattern}` becomes a table named
`{family.table_template}` (from `{family.path.name}`) at the next DAG-file parse, no deploy
needed. A member whose topic has been missing from every listing for
{family.retire_after} is retired: its runs read nothing from the broker and its hours up to
its last record are sealed as usual. A retired topic that comes back is read again.
Members: `tidemark status`; the record: `<state>/_families/{family.name}/members.json`.
""",
        params={"dry_run": dry_run_param("the topics found, new and retired")},
    ) as dag:

        @task(task_id="discover")
        def discover(**context: Any) -> dict[str, Any]:
            """The topics found, new, retired and back, as of the run's time."""
            from tidemark.family.discovery import discover_family

            return discover_family(
                family.name,
                Settings.from_env(),
                at=context["dag_run"].run_after,
                dry_run=bool(context["params"].get("dry_run")),
            ).to_json()

        discover()
    return dag
