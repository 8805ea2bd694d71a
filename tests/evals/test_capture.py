"""`pivot capture` against real hosts: this machine (real processes, real files) and the real
test sshd. The draft must hold the host text byte for byte, minus the secrets, and validate."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from agent.cli import full_app
from cards.model import card_text_bytes, load_card
from cards.replay import ReplayHost
from evals.capture import CaptureOptions, capture, card_text
from evals.harness import discover, load_cards
from evals.redact import Redactor, redact
from tools.local_host import LocalHost

app = full_app()

HF = "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz0123"
SK = "sk-proj-" + "Zy9Xw8Vu7Ts6Rq5Po4Nm3Lk2"
AWS_ID = "AKIA" + "ABCDEFGHIJKLMNOP"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "EXAMPLEKEY"
PASSWORD = "hunter2-correct-horse"
SECRETS = [
    HF,
    SK,
    AWS_ID,
    AWS_SECRET,
    PASSWORD,
    "s3cr3t-api-key-value",
    "eyJhbGciOiJIUzI1NiJ9.e30.sig",
]

LOG = (
    b"INFO server_args=ServerArgs(model_path='/models/m', max_total_num_tokens=12345)\n"
    b"Loading safetensors checkpoint shards:  10% \r Loading safetensors checkpoint shards:  90%\n"
    b"\x1b[31mERROR\x1b[0m torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    b"downloading https://user:" + PASSWORD.encode() + b"@mirror.example.com/model.bin\n"
    b"HF_TOKEN=" + HF.encode() + b" OPENAI_API_KEY=" + SK.encode() + b"\n"
    b"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig\n"
    b"bad bytes \xff\xfe and utf-8 \xe2\x96\x88\xe2\x96\x88 bars\n"
    b"NCCL INFO Bootstrap : Using eth0:10.20.30.40<0>\n"
)


def test_redaction_takes_secrets_and_keeps_evidence() -> None:
    text = (
        f"HF_TOKEN={HF}\nOPENAI_API_KEY={SK}\nAWS_ACCESS_KEY_ID={AWS_ID}\n"
        f"AWS_SECRET_ACCESS_KEY={AWS_SECRET}\nDB_PASSWORD={PASSWORD}\n"
        f'api_key: "s3cr3t-api-key-value"\n'
        "python -m vllm.entrypoints.openai.api_server --api-key s3cr3t-api-key-value --port 8000\n"
        "curl -H 'Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig' http://x\n"
        f"git clone https://bob:{PASSWORD}@git.example.com/r.git\n"
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\n"
        "max_total_num_tokens=12345, eos_token: </s>, --mem-fraction-static 0.9\n"
        "bind 0.0.0.0:30000 and 127.0.0.1:8000\n"
    )
    out = redact(text)
    for s in [*SECRETS, "MIIEow"]:
        assert s not in out
    for keep in (
        "max_total_num_tokens=12345",
        "eos_token: </s>",
        "--mem-fraction-static 0.9",
        "--port 8000",
        "git.example.com",
        "0.0.0.0:30000",
        "HF_TOKEN=",
        "--api-key ",
    ):
        assert keep in out
    assert "10.20" not in redact("eth0:10.20.30.40", hosts=True)
    assert redact("eth0:10.20.30.40") == "eth0:10.20.30.40"  # hosts only when asked


def test_host_redaction_is_consistent_and_keeps_addresses_parseable() -> None:
    r = Redactor(hosts=True, hostnames=["gpu-node-7", "gpu-node-7.corp.example.com"])
    a = r("gpu-node-7.corp.example.com listens on 10.1.2.3:30000; peer 10.1.2.4")
    b = r("from 10.1.2.3 on gpu-node-7: ok; 127.0.0.1 stays")
    assert "gpu-node-7" not in a + b and "10.1.2" not in a + b
    ip = a.split("on ")[1].split(":")[0]
    assert ip.startswith("192.0.2.") and ip in b  # same address, same stand-in
    assert "127.0.0.1 stays" in b
    assert r.report().counts["ip"] == 3


@pytest.mark.parametrize(
    "data",
    [
        b"plain\n",
        "caf\u00e9\n".encode(),
        "\u2588 bar\r\n".encode(),
        b"\xff\xfe raw\n",
        b"\x1b[0m\n",
    ],
)
def test_card_text_round_trips_bytes(data: bytes) -> None:
    assert card_text_bytes(card_text(data)) == data


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A real process that looks like a vLLM launch, with secrets in its argv and env."""
    env = dict(os.environ, HF_TOKEN=HF, AWS_SECRET_ACCESS_KEY=AWS_SECRET, NCCL_DEBUG="INFO")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time; time.sleep(60)",
            "vllm.entrypoints.openai.api_server",
            "--api-key",
            "s3cr3t-api-key-value",
            "--port",
            "8000",
        ],
        env=env,
    )
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def test_local_capture_of_a_real_process_and_log(
    tmp_path: Path, fake_server: subprocess.Popen[bytes]
) -> None:
    log = tmp_path / "logs" / "server.log"
    log.parent.mkdir()
    log.write_bytes(LOG)
    cfg = tmp_path / "launch.env"
    cfg.write_text(f"MODEL=/models/m\nHF_TOKEN={HF}\nDB_PASSWORD={PASSWORD}\n")
    out = tmp_path / "cards" / "local-capture.yaml"
    res = capture(
        LocalHost(), out, CaptureOptions(logs=[str(log)], configs=[str(cfg)], pid=fake_server.pid)
    )
    text = out.read_text()
    for s in SECRETS:
        assert s not in text, s
    assert "fill" in text.splitlines()[1] or "expected:" in text  # the operator is told what to do
    card = load_card(out)
    assert card.id == "local-capture" and card.expected is None and card.synthesized == []
    assert card.source.startswith("captured by pivot capture on localhost at ")
    assert card.engine == "vllm"
    # the log comes back through ReplayHost byte for byte, but for the redacted secrets
    replay = ReplayHost(card)
    got = replay.read_tail(str(log)).data
    want = LOG
    for s in (HF, SK, PASSWORD, "eyJhbGciOiJIUzI1NiJ9.e30.sig"):
        want = want.replace(s.encode(), b"")
    assert got.replace(b"***REDACTED***", b"").replace(b"hf_", b"").replace(b"sk-", b"").replace(
        b"***:***@", b"user:@"
    ) == want.replace(b"hf_", b"").replace(b"sk-", b"")
    assert b"\x1b[31mERROR" in got and b"\xff\xfe" in got and "\u2588".encode() in got
    # the server's own env (from /proc/PID/environ) and its argv, redacted
    assert "NCCL_DEBUG=INFO" in (card.host.env or "")
    assert "HF_TOKEN=***REDACTED***" in (card.host.env or "")
    ps = card.host.ps or ""
    assert f"{fake_server.pid}" in ps and "--api-key ***REDACTED***" in ps
    assert {"df -h", "df -h /dev/shm", "free -m"} <= set(card.host.commands)
    assert any(k in card.host.commands for k in ("ss -ltnp", "cat /proc/net/tcp /proc/net/tcp6"))
    assert str(cfg) in card.host.files and res.redaction.total >= len(SECRETS)
    # a draft is reported by the harness, not scored
    _, errors = load_cards(discover([out]))
    assert errors and "expected" in (errors[0].error or "")


def test_capture_over_the_real_sshd(sshd, ssh_host, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    log = sshd.scratch / "capture-server.log"
    log.write_bytes(LOG)
    log.chmod(0o644)
    out = tmp_path / "ssh-capture.yaml"
    res = capture(ssh_host, out, CaptureOptions(logs=[str(log)], redact_hosts=True))
    text = out.read_text()
    for s in SECRETS:
        assert s not in text
    assert "10.20.30.40" not in text and ssh_host.name not in text
    card = load_card(out)
    assert "a redacted host" in card.source
    assert card.host.nvidia_smi and "H200" in card.host.nvidia_smi  # the host's fake nvidia-smi
    assert card.host.nvidia_smi_full and "NVIDIA-SMI" in card.host.nvidia_smi_full
    assert card.host.files[str(log)].startswith("INFO server_args")
    assert "hostname" in res.redaction.counts or "ip" in res.redaction.counts


def test_capture_cli(tmp_path: Path) -> None:
    log = tmp_path / "s.log"
    log.write_bytes(LOG)
    out = tmp_path / "cli-draft.yaml"
    runner = CliRunner()
    args = [
        "capture",
        "--local",
        "--log",
        str(log),
        "-o",
        str(out),
        "--engine",
        "sglang",
        "--symptom",
        "It died at start-up.",
    ]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert f"wrote {out}" in r.output and "redacted:" in r.output
    data = yaml.safe_load(out.read_text())
    assert data["engine"] == "sglang" and data["symptom"] == "It died at start-up."
    assert "expected" not in data
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "exists" in r.output  # no silent overwrite
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0
    bad = runner.invoke(
        app, ["capture", "--local", "--log", str(log), "-o", str(tmp_path / "Bad Name.yaml")]
    )
    assert bad.exit_code == 2 and "kebab-case" in " ".join(bad.output.split())
    other = str(tmp_path / "other.yaml")
    both = runner.invoke(app, ["capture", "--local", "--host", "x", "--log", str(log), "-o", other])
    assert both.exit_code == 2 and "exactly one" in " ".join(both.output.split())


def test_big_log_keeps_launch_region_fatal_lines_and_tail(tmp_path: Path) -> None:
    """The OOM 12 MB before the end and the launch lines survive capture; gaps are marked."""
    from evals.capture import log_text

    log = tmp_path / "server.log"
    noise = b"".join(
        b"[TP0] Decode batch. #token: %d, gen throughput: 41.2\n" % i for i in range(5000)
    )
    with open(log, "wb") as fh:
        fh.write(b"$ python -m sglang.launch_server --port 1\nRuntimeError: earlier run\n")
        fh.write(b"$ python -m sglang.launch_server --model-path /m --port 30000\n")
        fh.write(b"server_args=ServerArgs(model_path='/m')\n")
        while fh.tell() < 30_000_000:
            fh.write(noise)
        fh.write(b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
        dead = b"[TP0] Scheduler hit an exception; engine dead\n" * 1000
        while fh.tell() < 42_000_000:
            fh.write(dead)
    text, note = log_text(LocalHost(), str(log), 256_000)
    assert text is not None and note
    lines = text.splitlines()
    assert lines[0].startswith("# \u2026 ") and "bytes not captured" in lines[0]
    assert lines[1] == "server_args=ServerArgs(model_path='/m')"  # the last launch marker
    assert "RuntimeError: earlier run" not in text  # an earlier launch is not this one
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in lines
    gaps = [ln for ln in lines if ln.startswith("# \u2026")]
    assert len(gaps) >= 3 and all(ln.endswith("bytes not captured \u2026") for ln in gaps)
    assert lines[-1] == "[TP0] Scheduler hit an exception; engine dead"
    assert len(text) < 1_000_000
