"""The decide DAG of a table: a way out of a stopped table, approved by a person in Airflow.

``tidemark_decide_<table>`` (manual): the trigger form names the decision and why; ``propose``
says what it would do (and fails at once, unretried, when it cannot apply); ``approve`` is
Airflow's human-in-the-loop approval, answered in the UI (*Required actions*) or its REST
API; ``apply`` applies it with the approving user in the audit record. A rejection skips
``apply``: nothing changes.
"""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from tidemark.airflow.common import dry_run_param, table_context, table_dag
from tidemark.config import TableConfig
from tidemark.ingest.approvals import APPROVABLE, MEANING
from tidemark.settings import Settings

log = logging.getLogger(__name__)


def approver_of(approval: dict[str, Any]) -> str:
    """The audit log's name of the person who approved (Airflow's user name, and its id when
    they differ)."""
    user = approval.get("responded_by_user") or {}
    name, user_id = str(user.get("name") or ""), str(user.get("id") or "")
    who = name if not user_id or user_id == name else f"{name} (id {user_id})"
    return f"{who or 'unknown user'} via Airflow"


def _params() -> dict[str, Any]:
    from airflow.sdk import Param

    return {
        "dry_run": dry_run_param("what the decision would do (nobody is asked, nothing applied)"),
        "action": Param(
            "replan",
            type="string",
            enum=list(APPROVABLE),
            title="Decision",
            description="The way out that the failing task or tidemark status names.",
        ),
        "reason": Param(
            "",
            type="string",
            minLength=3,
            title="Reason",
            description="Why, for the audit log (an incident id helps), e.g. 'poison range, INC-42'.",
        ),
    }


def _doc(table: str) -> str:
    choices = "\n".join(f"- **{action}**: {MEANING[action]}" for action in APPROVABLE)
    return f"""
### Decide for `{table}`
Trigger with the decision that the failing task or `tidemark status --table {table}` names, and
why. `propose` says what it would do; a person approves or rejects it in *Required actions*;
`apply` applies it, the approver and the reason in the audit log (the health page lists it).

{choices}

The CLI applies the same decisions for scripts: `tidemark resolve`, `tidemark unlock`.
"""


def propose_step(table: str, context: dict[str, Any]) -> str:
    """What the decision would do, for the approver; fails once when it cannot apply; a dry
    run stops here (approve and apply skipped)."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from tidemark.errors import TidemarkError
    from tidemark.ingest.approvals import propose

    config, settings = table_context(table)
    try:
        proposal = propose(config, settings, context["params"]["action"])
    except TidemarkError as exc:
        raise AirflowFailException(f"{exc} (not retried: nothing to approve)") from exc
    log.info("%s: proposed: %s", table, proposal)
    if context["params"]["dry_run"]:
        raise AirflowSkipException(f"dry run: nobody is asked, nothing applied: {proposal}")
    return str(proposal)


def apply_step(table: str, context: dict[str, Any]) -> str:
    """The approved decision, applied as the approver (once per run: a retry finds it done)."""
    from tidemark.ingest.approvals import apply_decision
    from tidemark.ingest.rebase import Decision

    config, settings = table_context(table)
    approval = context["ti"].xcom_pull(task_ids="approve")
    responded = approval["responded_at"]  # when the person decided (a datetime or its text)
    decision = Decision(
        action=context["params"]["action"],
        reason=context["params"]["reason"],
        by=approver_of(approval),
        at=responded if isinstance(responded, datetime) else datetime.fromisoformat(responded),
        run_id=context["run_id"],
    )
    record = apply_decision(config, settings, decision)
    return record.describe() if record else "nothing to do"


def decide_dag(config: TableConfig, settings: Settings) -> Any:
    """``tidemark_decide_<table>``: propose >> approve (a person) >> apply."""
    from airflow.providers.standard.operators.hitl import ApprovalOperator
    from airflow.sdk import task

    table = config.table
    with table_dag(
        config,
        "decide",
        description=f"A way out of a stopped {table}, approved by a person (audited)",
        schedule=None,
        doc_md=_doc(table),
        params=_params(),
    ) as dag:

        @task(task_id="propose")
        def propose_task(**context: Any) -> str:
            """What the decision would do, for the approver (``propose_step``)."""
            return propose_step(table, context)

        approve = ApprovalOperator(
            task_id="approve",
            subject=f"{table}: {{{{ params.action }}}}?",
            body="{{ ti.xcom_pull(task_ids='propose') }}\n\nReason given: {{ params.reason }}",
        )

        @task(task_id="apply")
        def apply_task(**context: Any) -> str:
            """The approved decision, applied as the approver (``apply_step``)."""
            return apply_step(table, context)

        propose_task() >> approve >> apply_task()
    return dag
