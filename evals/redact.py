"""Take secrets out of captured host text before it becomes a card that people share.

A captured card holds logs, env and `ps` lines verbatim, and those carry tokens: `HF_TOKEN=`
in an env dump, `--api-key` on a vLLM command line, a presigned URL in a download error. The
rules below replace the secret part only, so the line around it stays citable evidence.

The rules are deliberately narrow on names: `HF_TOKEN=...` is a secret but
`max_total_num_tokens=...` is the evidence of a KV-cache failure and must survive.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable

from pydantic import BaseModel, Field

MASK = "***REDACTED***"

_NAME_SECRET = (
    # ends like a secret name; tokenizer special tokens (eos_token: </s>) are not secrets
    r"(?!(?:bos|eos|pad|unk|sep|cls|mask)_token\b)[A-Za-z0-9_.-]*(?:_TOKEN|_KEY|_SECRET|APIKEY|SECRET)"
    r"|[A-Za-z0-9_.-]*(?:PASSWORD|PASSWD|PASSPHRASE)[A-Za-z0-9_]*"  # a password anywhere
)

#: (kind, pattern, replacement). Order matters: whole-token shapes before name=value rules.
_RULES: list[tuple[str, re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (
        "private_key",
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        f"-----BEGIN PRIVATE KEY-----{MASK}-----END PRIVATE KEY-----",
    ),
    (
        "url_credentials",
        re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"),
        r"\1***:***@",
    ),
    (
        "bearer",
        re.compile(r"(?i)\b(bearer\s+|authorization:\s*basic\s+)[A-Za-z0-9._~+/=-]{16,}"),
        rf"\1{MASK}",
    ),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{20,}"), f"hf_{MASK}"),
    ("openai_key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"), f"sk-{MASK}"),
    ("github_token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}"), f"gh_{MASK}"),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), f"AKIA{MASK}"),
    (
        "secret_flag",  # --api-key abc, --hf-token=abc, --password abc (command lines in ps)
        re.compile(
            r"(?i)(--?[a-z0-9-]*(?:api-key|token|secret|password|passwd)(?:=|\s+))(?!-)(\S+)"
        ),
        rf"\1{MASK}",
    ),
    (
        "secret_assignment",  # HF_TOKEN=abc, api_key: abc, "password": "abc", export X_KEY='y'
        re.compile(
            rf"(?i)(?<![A-Za-z0-9_.-])([\"']?(?:{_NAME_SECRET})[\"']?)(\s*[=:]\s*)([\"']?)([^\s\"',;]+)"
        ),
        rf"\1\2\3{MASK}",
    ),
]

_IPV4 = re.compile(
    r"(?<![\d.])((?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3})(?![\d.])"
)
#: Addresses that name no machine: leave them, they are evidence (a bind on 0.0.0.0:30000).
_KEEP_IPS = {"0.0.0.0", "127.0.0.1", "255.255.255.255"}


class Redaction(BaseModel):
    """What was taken out, by kind, so the operator can see the capture did its job."""

    counts: dict[str, int] = Field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


class Redactor:
    """Applies the secret rules, and with `hosts` also maps machine names and IPs to stand-ins.

    One redactor is used for a whole capture so the same IP gets the same stand-in in every
    file (a card keeps its internal consistency: the address in the log matches the one in ss).
    """

    def __init__(self, hosts: bool = False, hostnames: Iterable[str] = ()) -> None:
        self.hosts = hosts
        self.counts: Counter[str] = Counter()
        self._ips: dict[str, str] = {}
        names = sorted(
            {n for n in hostnames if n and n not in ("localhost",)}, key=len, reverse=True
        )
        self._names: dict[str, str] = {n: f"host-{i + 1}" for i, n in enumerate(names)}
        self._name_re = (
            re.compile(
                r"(?<![A-Za-z0-9.-])(" + "|".join(map(re.escape, names)) + r")(?![A-Za-z0-9-])"
            )
            if names
            else None
        )

    def __call__(self, text: str) -> str:
        for kind, pattern, repl in _RULES:
            text, n = pattern.subn(repl, text)
            if n:
                self.counts[kind] += n
        if self.hosts:
            text = self._redact_hosts(text)
        return text

    def _redact_hosts(self, text: str) -> str:
        def ip(m: re.Match[str]) -> str:
            addr = m.group(1)
            if addr in _KEEP_IPS:
                return addr
            self.counts["ip"] += 1
            # 192.0.2.0/24 is TEST-NET-1 (RFC 5737): still an IP, so parsers keep working.
            return self._ips.setdefault(addr, f"192.0.2.{len(self._ips) + 1}")

        text = _IPV4.sub(ip, text)
        if self._name_re is not None:

            def name(m: re.Match[str]) -> str:
                self.counts["hostname"] += 1
                return self._names[m.group(1)]

            text = self._name_re.sub(name, text)
        return text

    def report(self) -> Redaction:
        return Redaction(counts=dict(sorted(self.counts.items())))


def redact(text: str, hosts: bool = False, hostnames: Iterable[str] = ()) -> str:
    """One-shot redaction of a text (see `Redactor` for a capture-wide one)."""
    return Redactor(hosts=hosts, hostnames=hostnames)(text)
