"""Bearer tokens (`--auth`): loading them, and checking the one a call presents.

Every call except health probes (orchestrators carry no secrets) must present
`Bearer <token>`: gRPC in `authorization` metadata, HTTP in the `Authorization` header. An
inference token may call everything but the admin API; an admin token may call everything.
A missing or unknown token is refused UNAUTHENTICATED, an inference token on the admin API
PERMISSION_DENIED, each counted in `attnserve_auth_failures_total{code}`.

Tokens come from `--auth-tokens-file` (one `<role> <token>` per line, `#` comments) and
from the ATTNSERVE_INFERENCE_TOKENS / ATTNSERVE_ADMIN_TOKENS environment variables
(comma-separated), never from flags, which any user of the machine can read. A presented
token is compared with every configured one by `hmac.compare_digest`, so the time taken
does not tell how much of it matched.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from attnserve.service.engine.metrics import Metrics
from attnserve.service.errors import ServiceError, StartupError, Status
from attnserve.service.settings import Settings

INFERENCE, ADMIN = "inference", "admin"
ROLES = (INFERENCE, ADMIN)
ENVIRONMENT = {INFERENCE: "ATTNSERVE_INFERENCE_TOKENS", ADMIN: "ATTNSERVE_ADMIN_TOKENS"}
MIN_TOKEN_CHARS = 16
DENIED_MESSAGE = "authorization: this method needs an admin token"


@dataclass(frozen=True)
class Tokens:
    entries: tuple[tuple[bytes, str], ...]  # (token, role)

    def role_of(self, presented: bytes) -> str | None:
        role = None
        for token, token_role in self.entries:  # no early exit: every token is compared
            if hmac.compare_digest(presented, token):
                role = token_role
        return role


def _add(found: dict[str, str], token: str, role: str, where: str) -> None:
    if role not in ROLES:
        raise StartupError(f"{where}: unknown role {role!r}; roles are {', '.join(ROLES)}")
    if len(token) < MIN_TOKEN_CHARS or not token.isascii() or not token.isprintable() or " " in token:
        raise StartupError(
            f"{where}: a {role} token must be at least {MIN_TOKEN_CHARS} printable ASCII characters "
            "without spaces"
        )
    if found.get(token, role) != role:
        raise StartupError(f"{where}: the same token is listed with two roles")
    found[token] = role


def load_tokens(settings: Settings, environ: Mapping[str, str] = os.environ) -> Tokens:
    """The configured tokens; StartupError names the problem (never the token)."""
    found: dict[str, str] = {}
    path = settings.auth_tokens_file
    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise StartupError(f"--auth-tokens-file: cannot read {path}: {exc}") from None
        for number, line in enumerate(lines, 1):
            fields = line.split("#", 1)[0].split()
            if not fields:
                continue
            if len(fields) != 2:
                raise StartupError(f"{path} line {number}: expected '<role> <token>'")
            _add(found, fields[1], fields[0], f"{path} line {number}")
    for role, variable in ENVIRONMENT.items():
        for token in environ.get(variable, "").split(","):
            if token.strip():
                _add(found, token.strip(), role, variable)
    if not found:
        raise StartupError(
            "auth is on but no token is configured: set --auth-tokens-file, "
            f"{ENVIRONMENT[INFERENCE]} or {ENVIRONMENT[ADMIN]}"
        )
    return Tokens(tuple((token.encode(), role) for token, role in found.items()))


def bearer_token(value: str) -> bytes:
    """The token of an `authorization` value "Bearer <token>" (b"" for any other scheme)."""
    scheme, _, token = value.strip().partition(" ")
    return token.strip().encode("utf-8", "replace") if scheme.lower() == "bearer" else b""


class Authenticator:
    """Checks presented tokens and counts the refusals; `where` tells a refused client how to
    send one ("metadata 'authorization" on gRPC, "header 'Authorization" on HTTP)."""

    def __init__(self, tokens: Tokens, metrics: Metrics, where: str) -> None:
        self._tokens = tokens
        self._unauthenticated = f"authentication: missing or unknown token; send {where}: Bearer <token>'"
        codes = (Status.UNAUTHENTICATED, Status.PERMISSION_DENIED)
        self._failures = {code: metrics.auth_failures.labels(code.name) for code in codes}
        for child in self._failures.values():
            child.inc(0)

    def refusal(self, presented: bytes, *, admin: bool = False) -> ServiceError | None:
        """None when the token may make the call, else a new error to answer (counted)."""
        role = self._tokens.role_of(presented)
        if role is None:
            error = ServiceError(self._unauthenticated, Status.UNAUTHENTICATED)
        elif admin and role != ADMIN:
            error = ServiceError(DENIED_MESSAGE, Status.PERMISSION_DENIED)
        else:
            return None
        self._failures[error.code].inc()
        return error
