"""An Iceberg REST catalog (``TIDEMARK_ICEBERG_CATALOG_URI=http(s)://...``): Polaris, Unity,
Glue's and S3 Tables' endpoints, Nessie, Lakekeeper, Gravitino, or Iceberg's own server
(``tidemark-dev services start iceberg-rest``).

Its properties are the REST specification's, under the names both Iceberg's Java client and
pyiceberg take: ``uri``; ``credential`` (OAuth2 client credentials, ``client_id:secret``,
exchanged at ``oauth2-server-uri`` for a token; ``TIDEMARK_ICEBERG_CATALOG_CREDENTIAL``) or
``token`` (a bearer token; ``TIDEMARK_ICEBERG_CATALOG_TOKEN``); and any of ``warehouse``,
``prefix``, ``scope``, ``oauth2-server-uri``, ``header.<name>`` from
``TIDEMARK_ICEBERG_CATALOG_PROPERTIES``. The secrets stay in the environment and in the
processes that use them: never on a spark-submit command line, in a log or in a message.

Every call is bounded (``TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S``): Iceberg's Java client by its
connection and socket timeouts, pyiceberg's by a timeout on its HTTP session and on its
opening (which fetches the token and the catalog's config). A refused credential or a catalog
that does not answer is a named ``IcebergCatalogError``. A commit whose answer never came
(a timeout, a 5xx) has an unknown outcome: the seal plans it again, and finds its own commit in
the table's summaries when it landed (``hourcommit.iceberg``).
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import TYPE_CHECKING, Any

from tidemark.errors import IcebergCatalogAuthError, IcebergCatalogUnavailableError
from tidemark.iceberg_catalog_kind import CatalogKind, create_namespace, s3_properties
from tidemark.java_errors import java_class, java_message
from tidemark.masking import MASK, mask_text

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog

TOKENS_PATH = "/v1/oauth/tokens"  # the REST specification's token endpoint, beside the catalog
SECRETS = frozenset({"credential", "token"})
# what a refused credential or permission is, in pyiceberg and in Iceberg's Java client
_REFUSED = {"OAuthError", "UnauthorizedError", "ForbiddenError"}
_JAVA_REFUSED = {
    "org.apache.iceberg.exceptions.NotAuthorizedException",
    "org.apache.iceberg.exceptions.ForbiddenException",
}
# no answer: requests' Timeout and ConnectionError; the Java client's RESTException wraps them
_UNANSWERED = {"Timeout", "ConnectionError", "ConnectTimeout", "ReadTimeout"}
JAVA_UNANSWERED = (
    "org.apache.iceberg.exceptions.RESTException",
    "org.apache.iceberg.exceptions.ServiceUnavailableException",
    "org.apache.iceberg.exceptions.ServiceFailureException",
)
_opening = threading.Lock()


class RestCatalogKind(CatalogKind):
    """An Iceberg REST catalog, with OAuth2 client credentials or a bearer token."""

    @property
    def uri(self) -> str:
        return self.settings.iceberg_catalog_url.rstrip("/")

    def properties(self) -> dict[str, str]:
        """The catalog's properties as both Iceberg clients take them (secrets included)."""
        settings = self.settings
        properties = {"uri": self.uri, **settings.iceberg_catalog_properties}
        if settings.iceberg_catalog_credential:
            properties["credential"] = settings.iceberg_catalog_credential
            properties.setdefault("oauth2-server-uri", f"{self.uri}{TOKENS_PATH}")
        if settings.iceberg_catalog_token:
            properties["token"] = settings.iceberg_catalog_token
        return properties

    def open(self) -> Catalog:
        """pyiceberg's ``RestCatalog``, opened within the timeout; its HTTP calls bounded too."""
        timeout = self.settings.iceberg_catalog_timeout_s
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="iceberg-rest-open")
        try:
            with _opening:  # one opening at a time: pyiceberg's module state is not thread-safe
                catalog = pool.submit(self._open).result(timeout=timeout)
        except concurrent.futures.TimeoutError as exc:
            raise self.unavailable("opening the catalog", f"no answer within {timeout:g} s") from exc
        except Exception as exc:
            raise self.named(exc, "opening the catalog") from exc
        finally:
            pool.shutdown(wait=False)
        try:
            create_namespace(catalog)
        except Exception as exc:
            raise self.named(exc, "creating the namespace") from exc
        return catalog

    def _open(self) -> Catalog:
        from pyiceberg.catalog.rest import RestCatalog

        catalog = RestCatalog(self.settings.iceberg_catalog, **self.properties(), **s3_properties())
        session = catalog._session  # pyiceberg has no timeout property: every call gets one
        request = session.request
        timeout = self.settings.iceberg_catalog_timeout_s

        def bounded(method: str, url: str, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout)
            return request(method, url, **kwargs)

        session.request = bounded  # type: ignore[method-assign,assignment]
        return catalog

    def java_properties(self) -> dict[str, str]:
        """The Java client's: its timeouts, and Hadoop's FileIO unless the properties name
        another (the files through s3a and the ``AWS_*`` environment, as the SQL catalog's
        tables; the REST client's own default would pick Iceberg's S3FileIO for s3a://). A
        catalog that names S3FileIO for its tables (Nessie) gets it with the AWS SDK's
        URL-connection client (jvm/pom.xml's s3a profile; Iceberg's default, the Apache 5
        client, is not in the SDK bundle hadoop-aws 3.4.2 takes)."""
        milliseconds = str(int(self.settings.iceberg_catalog_timeout_s * 1000))
        return {
            "type": "rest",
            "io-impl": "org.apache.iceberg.hadoop.HadoopFileIO",
            "http-client.type": "urlconnection",
            **self.properties(),
            "rest.client.connection-timeout-ms": milliseconds,
            "rest.client.socket-timeout-ms": milliseconds,
        }

    def trino_properties(self) -> dict[str, str]:
        """Trino's REST catalog settings (``iceberg.rest-catalog.*``); headers it cannot send."""
        extra = self.settings.iceberg_catalog_properties
        trino = {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "rest",
            "iceberg.rest-catalog.uri": self.uri,
        }
        for name in ("warehouse", "prefix"):
            if extra.get(name):
                trino[f"iceberg.rest-catalog.{name}"] = extra[name]
        if self.settings.iceberg_catalog_credential or self.settings.iceberg_catalog_token:
            # the secret from the server's environment (Trino's ${ENV:...}), never in the file
            trino["iceberg.rest-catalog.security"] = "OAUTH2"
            if self.settings.iceberg_catalog_credential:
                trino["iceberg.rest-catalog.oauth2.credential"] = "${ENV:TIDEMARK_ICEBERG_CATALOG_CREDENTIAL}"
            else:
                trino["iceberg.rest-catalog.oauth2.token"] = "${ENV:TIDEMARK_ICEBERG_CATALOG_TOKEN}"
            properties = self.properties()
            for name, key in (("scope", "scope"), ("oauth2-server-uri", "server-uri")):
                if properties.get(name):
                    trino[f"iceberg.rest-catalog.oauth2.{key}"] = properties[name]
        return trino

    def secret_properties(self) -> frozenset[str]:
        return SECRETS

    def describe(self) -> str:
        client = self.settings.iceberg_catalog_credential.partition(":")[0]
        how = (
            f"client {client!r}, secret {MASK}"
            if client
            else ("a bearer token" if self.settings.iceberg_catalog_token else "no credential")
        )
        return f"the Iceberg REST catalog at {mask_text(self.uri)} ({how})"

    def scrub(self, text: str) -> str:
        """``text`` without the catalog's secrets (some servers echo what they were sent)."""
        for secret in (self.settings.iceberg_catalog_credential, self.settings.iceberg_catalog_token):
            for part in {secret, secret.partition(":")[2]} - {""}:
                text = text.replace(part, MASK)
        return mask_text(text)

    def named(self, exc: BaseException, operation: str) -> BaseException:
        """The named error of a refused credential or a catalog without an answer, else ``exc``."""
        names = {c.__name__ for c in type(exc).__mro__}
        java = java_class(exc)
        detail = self.scrub(java_message(exc) if java else f"{type(exc).__name__}: {exc}")
        if names & _REFUSED or java in _JAVA_REFUSED:
            return IcebergCatalogAuthError(
                f"{self.describe()} refused tidemark's credential while {operation}: {detail}. Nothing was "
                "committed; set TIDEMARK_ICEBERG_CATALOG_CREDENTIAL (client_id:secret) or "
                "TIDEMARK_ICEBERG_CATALOG_TOKEN to one it accepts, then retry the task"
            )
        if names & _UNANSWERED or java in JAVA_UNANSWERED:
            return self.unavailable(operation, detail)
        return exc

    def unavailable(self, operation: str, detail: str) -> IcebergCatalogUnavailableError:
        return IcebergCatalogUnavailableError(
            f"{self.describe()} did not answer while {operation} ({detail}; "
            f"TIDEMARK_ICEBERG_CATALOG_TIMEOUT_S={self.settings.iceberg_catalog_timeout_s:g}). A commit "
            "whose answer never came is checked by the retry, which finds it in the table's summaries "
            "when it landed: retry the task once the catalog answers"
        )
