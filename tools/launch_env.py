"""`launch_env`: the environment the server was launched with, secrets redacted.

Half the "it works on one box, not the other" failures are an environment variable: a
CUDA_VISIBLE_DEVICES typo, an NCCL_SOCKET_IFNAME naming a missing interface, an http_proxy that
catches the server's own warm-up request, an HF_HOME on a full disk. The live server's own
environment is `/proc/PID/environ` (NUL-separated); with no live server the SSH login's `env` is
the next best thing and is said to be so. Values of keys that look like secrets (tokens, keys,
passwords) never leave the host. Read-only: `cat` of one /proc file or `env`, nothing else.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, failed
from tools.host import Host

#: keys whose values are secrets: shown as <redacted>, never cited, never stored
_SECRET = re.compile(r"(?i)token|secret|passw|api_?key|access_?key|credential|auth|cookie|private")
#: a user:password@ in a URL value (a proxy with credentials)
_URL_CRED = re.compile(r"(://)[^/@\s:]+:[^/@\s]+@")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_VARS = 400


class Args(BaseModel):
    pid: int | None = Field(
        None,
        description="the server's pid: its own environment (/proc/PID/environ); without it, "
        "the login shell's environment (not necessarily the launch's)",
    )


class Result(ToolResult):
    source: str = Field("", description="/proc/PID/environ, or `env` of the login shell")
    variables: dict[str, str] = Field(default_factory=dict)
    redacted: list[str] = Field(default_factory=list, description="keys whose values were hidden")

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [f"{k}={v}" for k, v in self.variables.items()]
        out.append(f"# {len(self.variables)} variables from {self.source}")
        if self.redacted:
            out.append(f"# values hidden (secrets): {', '.join(self.redacted)}")
        if not self.source.startswith("/proc/"):
            out.append("# this is the login shell's environment; the server's may differ")
        return out + super().lines()


#: launch-steering variables worth showing (the rest of a login environment is noise)
STEERING = re.compile(
    r"(?i)^(?:CUDA_|NVIDIA_|NCCL_|GLOO_|UCX_|TORCH|PYTORCH_|VLLM_|SGLANG_|TRTLLM_|TLLM_|HF_|"
    r"HUGGINGFACE|TRANSFORMERS_|FLASHINFER_|TRITON_|MASTER_|WORLD_SIZE$|RANK$|LOCAL_RANK$|"
    r"OMP_NUM_THREADS$|LD_LIBRARY_PATH$|LD_PRELOAD$|PYTHONPATH$|.*_PROXY$|NO_PROXY$)"
)


def is_secret(key: str) -> bool:
    """A variable whose value is never shown (a token, a password, a key)."""
    return bool(_SECRET.search(key))


def parse_env(text: str, sep: str = "\n") -> tuple[dict[str, str], list[str]]:
    """KEY=VALUE records (newline- or NUL-separated) -> ({key: value}, redacted keys)."""
    out: dict[str, str] = {}
    hidden: list[str] = []
    for rec in text.split(sep):
        key, eq, value = rec.partition("=")
        if not eq or not _KEY.match(key) or len(out) >= MAX_VARS:
            continue
        if _SECRET.search(key):
            hidden.append(key)
            value = "<redacted>"
        else:
            value = _URL_CRED.sub(r"\1<redacted>@", value)
        out[key] = value.replace("\n", "\\n")[:500]
    return out, hidden


def run(host: Host, args: Args) -> Result:
    if args.pid is not None:
        source = f"/proc/{args.pid}/environ"
        res = host.run(f"cat {source}", timeout=10, max_bytes=256_000)
        sep = "\0"
    else:
        source = "env (the SSH login shell)"
        res = host.run("env", timeout=10, max_bytes=256_000)
        sep = "\n"
    if not res.ok:
        r = failed(Result, res, source=source)
        if "denied" in (res.stderr or "").lower():
            r.fix = "run as root or as the server's user to read its environment"
        return r
    variables, hidden = parse_env(res.stdout, sep if "\0" in res.stdout else "\n")
    return Result(host=host.name, source=source, variables=variables, redacted=hidden)


SPEC = ToolSpec(
    name="launch_env",
    description=(
        "The environment the server was launched with (/proc/PID/environ with pid=, else the "
        "login shell's env), secret values redacted: CUDA_VISIBLE_DEVICES, NCCL_*, proxies "
        "(http_proxy/no_proxy), HF_HOME, PYTORCH_CUDA_ALLOC_CONF. Use it when a setting may "
        "be behind the failure: a misspelled variable, an interface NCCL cannot find, a proxy "
        "that catches the server's own requests."
    ),
    args=Args,
    result=Result,
    fn=run,
)
