"""A STAND-IN for the Confluent Schema Registry, for tests and the demo only.

No real registry installs from the package registries here (Confluent's and Apicurio's are
Java services, Karapace is not on PyPI), so this serves the documented subset of Confluent's
REST API that producers' serializers and tidemark's reader use, in memory:

- ``POST /subjects/{subject}/versions``: register a schema (the same text again keeps its id),
  with its ``references`` (other subjects' versions, as Protobuf imports are registered);
- ``POST /subjects/{subject}``: look a schema up under a subject (its id and version);
- ``GET /schemas/ids/{id}``: a schema by id (404, error code 40403, when unknown);
- ``GET /subjects``, ``GET /subjects/{subject}/versions``,
  ``GET /subjects/{subject}/versions/{version|latest}``.

Compatibility checks, contexts and modes are not served. Producers use
confluent-kafka's real ``AvroSerializer`` against it, so the bytes on the wire are what real
producers send; tidemark reads with confluent-kafka's real ``SchemaRegistryClient``.
"""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


class SchemaRegistryStandIn:
    """The stand-in, serving on 127.0.0.1 from a thread; ``user_info`` ("user:password")
    turns on HTTP basic authentication."""

    def __init__(self, port: int = 0, user_info: str | None = None) -> None:
        self.schemas: list[dict[str, Any]] = []  # id - 1 -> {"schema", "schemaType"}
        self.subjects: dict[str, list[int]] = {}  # subject -> ids by version
        self.requests = 0
        self._lock = threading.Lock()
        self._auth = "Basic " + base64.b64encode(user_info.encode()).decode() if user_info else None
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> SchemaRegistryStandIn:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="registry-stand-in", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def register(
        self,
        subject: str,
        schema: str,
        schema_type: str = "AVRO",
        references: list[dict[str, Any]] | None = None,
    ) -> int:
        with self._lock:
            entry = {"schema": schema, "schemaType": schema_type, "references": references or []}
            if entry in self.schemas:
                schema_id = self.schemas.index(entry) + 1
            else:
                self.schemas.append(entry)
                schema_id = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def _answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        parts = [unquote(p) for p in urlsplit(path).path.strip("/").split("/")]
        if method == "POST" and len(parts) == 3 and parts[0] == "subjects" and parts[2] == "versions":
            request = json.loads(body or b"{}")
            schema_id = self.register(
                parts[1], request["schema"], request.get("schemaType", "AVRO"), request.get("references")
            )
            return 200, {"id": schema_id}
        if method == "POST" and len(parts) == 2 and parts[0] == "subjects":
            return self._lookup(parts[1], json.loads(body or b"{}"))
        if method != "GET":
            return 405, {"error_code": 405, "message": f"{method} is not served by the stand-in"}
        if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
            schema_id = int(parts[2])
            if not 1 <= schema_id <= len(self.schemas):
                return 404, {"error_code": 40403, "message": "Schema not found"}
            return 200, self._shown(self.schemas[schema_id - 1])
        if parts == ["subjects"]:
            return 200, sorted(self.subjects)
        if len(parts) >= 3 and parts[0] == "subjects" and parts[2] == "versions":
            versions = self.subjects.get(parts[1])
            if versions is None:
                return 404, {"error_code": 40401, "message": f"Subject '{parts[1]}' not found."}
            if len(parts) == 3:
                return 200, list(range(1, len(versions) + 1))
            wanted = len(versions) if parts[3] == "latest" else int(parts[3]) if parts[3].isdigit() else 0
            if not 1 <= wanted <= len(versions):
                return 404, {"error_code": 40402, "message": "Version not found."}
            schema_id = versions[wanted - 1]
            shown = self._shown(self.schemas[schema_id - 1])
            return 200, {"subject": parts[1], "version": wanted, "id": schema_id, **shown}
        return 404, {"error_code": 404, "message": f"{path} is not served by the stand-in"}

    def _lookup(self, subject: str, request: dict[str, Any]) -> tuple[int, Any]:
        entry = {
            "schema": request.get("schema"),
            "schemaType": request.get("schemaType", "AVRO"),
            "references": request.get("references") or [],
        }
        versions = self.subjects.get(subject)
        if versions is None:
            return 404, {"error_code": 40401, "message": f"Subject '{subject}' not found."}
        if entry not in self.schemas or self.schemas.index(entry) + 1 not in versions:
            return 404, {"error_code": 40403, "message": "Schema not found"}
        schema_id = self.schemas.index(entry) + 1
        shown = self._shown(entry)
        return 200, {"subject": subject, "version": versions.index(schema_id) + 1, "id": schema_id, **shown}

    @staticmethod
    def _shown(entry: dict[str, Any]) -> dict[str, Any]:
        shown = {"schema": entry["schema"]}
        if entry["schemaType"] != "AVRO":  # the registry omits the default type
            shown["schemaType"] = entry["schemaType"]
        if entry["references"]:
            shown["references"] = entry["references"]
        return shown

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self, method: str) -> None:
                standin.requests += 1
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if standin._auth is not None and self.headers.get("Authorization") != standin._auth:
                    status, answer = 401, {"error_code": 401, "message": "Unauthorized"}
                else:
                    status, answer = standin._answer(method, self.path, body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", CONTENT_TYPE)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
