"""A stand-in for an auth manager with DAG-level permissions (FAB's ``can read on DAG:<id>``,
Keycloak's resources), which Airflow's SimpleAuthManager lacks: SimpleAuthManager itself, with
one rule added for the user ``viewer``, who may read only the DAGs of the table named in
``TIDEMARK_TEST_VIEWER_TABLE``. Login, tokens and every other decision are SimpleAuthManager's
own; the tidemark plugin asks it through the same ``is_authorized_dag`` call it makes of any
auth manager. Set with ``AIRFLOW__CORE__AUTH_MANAGER=tests.helpers.auth_manager.OneTableViewer``."""

from __future__ import annotations

import os
from typing import Any

from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager  # noqa: TID253


class OneTableViewer(SimpleAuthManager):
    def is_authorized_dag(
        self, *, method: Any, user: Any, access_entity: Any = None, details: Any = None
    ) -> bool:
        allowed = super().is_authorized_dag(
            method=method, user=user, access_entity=access_entity, details=details
        )
        if user.get_name() != "viewer" or details is None or not details.id:
            return bool(allowed)
        return bool(allowed) and str(details.id).endswith("_" + os.environ["TIDEMARK_TEST_VIEWER_TABLE"])
