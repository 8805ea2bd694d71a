"""`model_file` tells a model file from what only looks like one, on real files and hosts.

The parser is a pure function with its table of cases (real magics, written with struct); the
tool runs its two fixed commands (stat, od) on the local host and over the real test sshd, and a
replayed card that never recorded the read says so instead of guessing.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cards.model import IncidentCard
from cards.replay import ReplayHost
from tools.local_host import LocalHost
from tools.model_file import SPEC, classify, parse_od
from tools.registry import TOOLS
from tools.ssh_host import SSHHost

GGUF_V3 = b"GGUF" + struct.pack("<IQQ", 3, 196, 40) + b"\x00" * 40
SAFETENSORS = struct.pack("<Q", 20) + b'{"__metadata__":{} }' + b"\x00" * 64
LFS = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4f44213c\nsize 4368439584\n"
)  # fmt: skip
HTML = b"\n<!DOCTYPE html>\n<html><head><title>Sign in</title></head></html>\n"
GGJT = b"tjgg" + struct.pack("<I", 3) + b"\x00" * 56  # 'invalid magic number 67676a74'

CASES = [
    (GGUF_V3, "gguf", "GGUF v3: 196 tensors, 40 metadata keys"),
    (b"GGUF" + struct.pack("<III", 1, 7, 9) + b"\x00" * 8, "gguf", "GGUF v1: 7 tensors, 9"),
    (b"GGUF\x03\x00", "gguf", "the file is cut"),
    (GGJT, "ggml", "pre-GGUF ggjt"),
    (LFS, "lfs_pointer", "git lfs pull"),
    (HTML, "html", "HTML page"),
    (SAFETENSORS, "safetensors", "a 20-byte JSON header"),
    (struct.pack("<Q", 10**9) + b"{" + b"\x00" * 20, "safetensors", "the file is cut"),
    (b"PK\x03\x04" + b"\x00" * 30, "zip", "torch.save"),
    (b"\x80\x02}q\x00", "pickle", "pickle"),
    (b"hello, this is a log line\n", "text", "plain text"),
    (b"\x00\x01\x02\xff" * 4, "unknown", "no known model format"),
]


@pytest.mark.parametrize(("data", "kind", "says"), CASES)
def test_first_bytes_name_the_format(data: bytes, kind: str, says: str) -> None:
    got = classify(data[:64], len(data))
    assert got["kind"] == kind and says in str(got["verdict"]), got


def test_an_empty_file_and_od_output_parse() -> None:
    assert classify(b"", 0)["kind"] == "empty"
    assert parse_od(" 47 47 55 46 03 00\n 00 00\n") == b"GGUF\x03\x00\x00\x00"


def _files(tmp_path: Path) -> dict[str, Path]:
    out = {}
    for name, data in {
        "m.gguf": GGUF_V3,
        "lfs.gguf": LFS,
        "page.gguf": HTML,
        "old.bin": GGJT,
    }.items():
        p = tmp_path / name
        p.write_bytes(data)
        p.chmod(0o644)
        out[name] = p
    return out


def test_on_the_local_host_every_file_and_every_failure_is_typed(tmp_path: Path) -> None:
    files = _files(tmp_path)
    host = LocalHost()
    kinds = {n: SPEC.call(host, {"path": str(p)}).kind for n, p in files.items()}
    assert kinds == {
        "m.gguf": "gguf",
        "lfs.gguf": "lfs_pointer",
        "page.gguf": "html",
        "old.bin": "ggml",
    }
    gguf = SPEC.call(host, {"path": str(files["m.gguf"])})
    assert (gguf.ok, gguf.size_bytes, gguf.tensor_count, gguf.kv_count) == (True, 64, 196, 40)
    assert "GGUF v3" in "\n".join(gguf.lines())
    missing = SPEC.call(host, {"path": str(tmp_path / "nope.gguf")})
    assert not missing.ok and "does not exist" in (missing.fix or "")
    folder = SPEC.call(host, {"path": str(tmp_path)})
    assert not folder.ok and "not the directory" in (folder.fix or "")


def test_over_the_real_sshd_the_same_answer(ssh_host: SSHHost, sshd, tmp_path: Path) -> None:
    base = sshd.scratch / "model-file"
    base.mkdir(mode=0o755, exist_ok=True)
    target = base / "m.gguf"
    target.write_bytes(GGUF_V3)
    target.chmod(0o644)
    res = SPEC.call(ssh_host, {"path": str(target)})
    assert res.ok and res.host == ssh_host.name, res.error
    assert (res.kind, res.gguf_version, res.tensor_count) == ("gguf", 3, 196)


def test_a_card_that_did_not_record_the_read_says_so() -> None:
    card = IncidentCard.model_validate(
        {
            "id": "model-file-replay",
            "title": "t",
            "source": "test",
            "engine": "llama.cpp",
            "symptom": "s",
            "host": {"files": {"/models/m.gguf": "GGUF"}},
        }
    )
    res = SPEC.call(ReplayHost(card), {"path": "/models/m.gguf"})
    assert not res.ok and "not recorded" in (res.error or "") and res.fix


def test_the_registry_found_it_as_a_read_only_tool_outside_the_sweep() -> None:
    spec = TOOLS["model_file"]
    assert spec is SPEC and not spec.changing and spec.first_sweep is None
