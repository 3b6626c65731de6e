"""Plain HTTP calls for tests (the standard library's http.client: no client library of ours)."""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error(self) -> dict[str, str]:
        """The JSON API's {"error": {"code", "message"}}."""
        error: dict[str, str] = self.json()["error"]
        return error


def call(
    port: int,
    method: str,
    path: str,
    body: bytes | str | dict[str, Any] | list[Any] | None = None,
    headers: dict[str, str] | None = None,
    *,
    timeout: float = 30,
    context: ssl.SSLContext | None = None,
) -> Reply:
    if isinstance(body, dict | list):
        body = json.dumps(body)
    if context is not None:
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            "127.0.0.1", port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        data = response.read()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
    finally:
        connection.close()


def classify(port: int, model: str, document: dict[str, Any], **kwargs: Any) -> Reply:
    return call(port, "POST", f"/v1/models/{model}:classify", document, **kwargs)
