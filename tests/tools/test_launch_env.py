"""launch_env and host_facts' env section: the settings that steer a launch, secrets never shown."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tools import host_facts, launch_env
from tools.local_host import LocalHost


def test_a_live_process_environment_is_read_and_its_secrets_hidden() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "HF_TOKEN": "hf_supersecretvalue123",
        "http_proxy": "http://alice:pa55word@proxy.corp:3128",
        "NCCL_SOCKET_IFNAME": "eth9",
    }
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)
    try:
        time.sleep(0.2)
        r = launch_env.run(LocalHost(), launch_env.Args(pid=p.pid))
    finally:
        p.kill()
        p.wait()
    assert r.ok and r.source == f"/proc/{p.pid}/environ", r.error
    assert r.variables["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert r.variables["NCCL_SOCKET_IFNAME"] == "eth9"
    assert r.variables["HF_TOKEN"] == "<redacted>" and "HF_TOKEN" in r.redacted
    assert r.variables["http_proxy"] == "http://<redacted>@proxy.corp:3128"
    text = "\n".join(r.lines())
    assert "supersecret" not in text and "pa55word" not in text


def test_a_missing_pid_is_a_failed_read_with_a_reason() -> None:
    r = launch_env.run(LocalHost(), launch_env.Args(pid=2**22 + 7))
    assert not r.ok and r.error


def test_host_facts_env_keeps_launch_settings_only(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("NCCL_DEBUG", "INFO")
    monkeypatch.setenv("no_proxy", "localhost,127.0.0.1")
    monkeypatch.setenv("SOME_API_KEY", "sk-abcdef")
    monkeypatch.setenv("LS_COLORS", "di=01;34")
    r = host_facts.run(LocalHost(), host_facts.Args(sections=["env"]))
    lines = r.sections[0].lines
    assert "NCCL_DEBUG=INFO" in lines and "no_proxy=localhost,127.0.0.1" in lines
    assert not [ln for ln in lines if ln.startswith(("LS_COLORS", "SOME_API_KEY"))]
    assert "sk-abcdef" not in "\n".join(r.lines())
    assert os.environ["NCCL_DEBUG"] == "INFO"
