"""Bearer-token auth: one token per installation, created on first start, stored only as a hash.

The token is 32 random bytes (url-safe), so a salted SHA-256 is enough: there is nothing to
brute-force that a slow KDF would protect, and every request pays the check.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from pydantic import BaseModel

TOKEN_FILE = "server-token.json"


class StoredToken(BaseModel):
    algo: str = "sha256"
    salt: str
    digest: str


def digest(token: str, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{token}".encode()).hexdigest()


def stored_for(token: str) -> StoredToken:
    salt = secrets.token_hex(16)
    return StoredToken(salt=salt, digest=digest(token, salt))


class TokenVerifier:
    """Checks a presented token against the stored hash in constant time."""

    def __init__(self, stored: StoredToken) -> None:
        self._stored = stored

    @classmethod
    def for_token(cls, token: str) -> TokenVerifier:
        return cls(stored_for(token))

    def __call__(self, presented: str | None) -> bool:
        if not presented:
            return False
        return hmac.compare_digest(digest(presented, self._stored.salt), self._stored.digest)


def load_stored(home: Path) -> StoredToken | None:
    path = home / TOKEN_FILE
    try:
        return StoredToken.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def ensure_token(home: Path) -> tuple[TokenVerifier, str | None]:
    """The verifier for this home; the plain token too, only when it was just created.

    The caller prints a fresh token once; afterwards only its hash exists anywhere.
    """
    stored = load_stored(home)
    if stored is not None:
        return TokenVerifier(stored), None
    token = secrets.token_urlsafe(32)
    stored = stored_for(token)
    home.mkdir(parents=True, exist_ok=True)
    path = home / TOKEN_FILE
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(stored.model_dump(), fh)
    os.replace(tmp, path)
    return TokenVerifier(stored), token


def reset_token(home: Path) -> str:
    """Replace the stored token (the old one stops working at the next start)."""
    (home / TOKEN_FILE).unlink(missing_ok=True)
    _, token = ensure_token(home)
    assert token is not None
    return token


class BearerGate:
    """ASGI gate in front of everything under /api/ except the public paths.

    It answers 401 before routing, body parsing or validation, so no API route (known or not,
    valid request or not) says anything to a caller without the token. The per-route dependency
    in deps.py stays for the OpenAPI security scheme and as a second check.
    """

    def __init__(self, app: Any, verifier: TokenVerifier, public: tuple[str, ...]) -> None:
        self.app = app
        self.verifier = verifier
        self.public = public

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path.startswith("/api/") and path not in self.public:
            token = None
            for name, value in scope.get("headers", []):
                if name == b"authorization":
                    scheme, _, cred = value.decode("latin-1").partition(" ")
                    token = cred.strip() if scheme.lower() == "bearer" else None
            if not self.verifier(token):
                body = b'{"detail":"missing or wrong bearer token (see the token `pivot serve` printed)"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"www-authenticate", b"Bearer"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)
