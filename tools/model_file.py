"""`model_file`: what a model file on the host really is, from its size and first 64 bytes.

"invalid magic number", "is this really a GGML file?", a safetensors header error or a loader
that dies reading a 134-byte "model" all have one cheap answer: look at the file's first bytes.
A Git LFS pointer (the clone never pulled the weights), an HTML page saved as the model (a
download behind a login), a pre-GGUF GGML file, an empty or cut file and a real GGUF (with its
version, tensor and metadata-key counts) or safetensors file (with its header size) are told
apart here. Two fixed commands with the quoted path (`stat`, `od -N 64`): nothing is executed
from the file and nothing larger than 64 bytes travels.
"""

from __future__ import annotations

import re
import shlex
import struct
from typing import Literal

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, failed
from tools.host import Host

HEAD_BYTES = 64
Kind = Literal[
    "gguf",
    "ggml",
    "safetensors",
    "zip",
    "pickle",
    "lfs_pointer",
    "html",
    "text",
    "empty",
    "unknown",
]
#: Pre-GGUF magics as they lie on disk (little-endian 'ggml', 'ggjt', 'ggmf', 'ggla').
_GGML_MAGICS = {b"lmgg": "ggml", b"tjgg": "ggjt", b"fmgg": "ggmf", b"algg": "ggla"}
_HEX = re.compile(r"^[0-9a-f]{2}$")


class Args(BaseModel):
    path: str = Field(
        description="the model file the loader was given (a .gguf, .safetensors, .bin)"
    )


class Result(ToolResult):
    path: str = ""
    size_bytes: int | None = None
    kind: Kind | None = None
    gguf_version: int | None = None
    tensor_count: int | None = None
    kv_count: int | None = None
    safetensors_header_bytes: int | None = None
    head_hex: str = Field("", description="the first 16 bytes, hex")
    verdict: str = ""

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        return [
            f"# model_file {self.path}: {self.size_bytes} bytes, first bytes {self.head_hex}",
            f"# {self.verdict}",
        ]


def parse_od(text: str) -> bytes:
    """The bytes `od -An -v -tx1` printed (hex pairs separated by spaces and newlines)."""
    return bytes(int(tok, 16) for tok in text.split() if _HEX.match(tok))


def classify(head: bytes, size: int) -> dict[str, object]:
    """What the first bytes say the file is; fields of `Result` with the verdict line."""
    out: dict[str, object] = {"head_hex": head[:16].hex(" ")}
    if size == 0:
        return out | {"kind": "empty", "verdict": "the file is empty: the download or copy failed"}
    if head.startswith(b"GGUF"):
        return out | _gguf(head, size)
    if head[:4] in _GGML_MAGICS:
        name = _GGML_MAGICS[head[:4]]
        return out | {
            "kind": "ggml",
            "verdict": f"a pre-GGUF {name} file: current llama.cpp loads only GGUF; convert it "
            "(convert_hf_to_gguf.py from the original weights) or download the .gguf",
        }
    if head.startswith(b"version https://git-lfs"):
        return out | {
            "kind": "lfs_pointer",
            "verdict": f"a Git LFS pointer ({size} bytes), not the weights: run `git lfs pull` "
            "in the clone (or download the file itself)",
        }
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype html", b"<html", b"<?xml", b"<head")):
        return out | {
            "kind": "html",
            "verdict": "an HTML page saved as the model (a login, error or redirect page): "
            "download it again with the token/URL that serves the file itself",
        }
    if len(head) >= 9 and head[8:9] == b"{":
        n = struct.unpack_from("<Q", head)[0]
        if 0 < n < size:
            return out | {
                "kind": "safetensors",
                "safetensors_header_bytes": n,
                "verdict": f"safetensors: a {n}-byte JSON header, {size - 8 - n} bytes of tensors",
            }
        return out | {
            "kind": "safetensors",
            "safetensors_header_bytes": n,
            "verdict": f"safetensors whose header claims {n} bytes of a {size}-byte file: "
            "the file is cut; download it again",
        }
    if head.startswith(b"PK\x03\x04"):
        return out | {"kind": "zip", "verdict": "a zip archive (a torch.save checkpoint, .pt/.bin)"}
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return out | {"kind": "pickle", "verdict": "a Python pickle (a legacy torch checkpoint)"}
    if all(32 <= b < 127 or b in (9, 10, 13) for b in head):
        return out | {"kind": "text", "verdict": "plain text, not model weights"}
    return out | {"kind": "unknown", "verdict": "no known model format starts with these bytes"}


def _gguf(head: bytes, size: int) -> dict[str, object]:
    if len(head) < 24 or size < 24:
        return {"kind": "gguf", "verdict": f"GGUF magic but only {size} bytes: the file is cut"}
    version = struct.unpack_from("<I", head, 4)[0]
    if version == 1:  # GGUF v1 counted in 32 bits
        tensors, kvs = struct.unpack_from("<II", head, 8)
    else:
        tensors, kvs = struct.unpack_from("<QQ", head, 8)
    verdict = f"GGUF v{version}: {tensors} tensors, {kvs} metadata keys, {size / 1e9:.2f} GB"
    if version not in (1, 2, 3):
        verdict += f"; version {version} is not one llama.cpp writes (1-3): a corrupt header?"
    return {
        "kind": "gguf",
        "gguf_version": version,
        "tensor_count": tensors,
        "kv_count": kvs,
        "verdict": verdict,
    }


def run(host: Host, args: Args) -> Result:
    q = shlex.quote(args.path)
    st = host.run(f"stat -Lc %s -- {q}")
    if not st.ok:
        res = failed(Result, st, path=args.path)
        if "no such file" in (st.stderr or "").lower():
            res.fix = "the path does not exist there: check the loader's -m/--model argument"
        return res
    size_tok = (st.stdout.split() or [""])[0]
    if not size_tok.isdigit():
        return Result(
            host=host.name,
            ok=False,
            path=args.path,
            error=f"stat on {host.name} gave no size for {args.path}: {st.stdout.strip()[:200]!r}",
            fix="check the path (ls -l) and read it again",
        )
    size = int(size_tok)
    head = b""
    if size:
        od = host.run(f"od -An -v -tx1 -N {HEAD_BYTES} -- {q}")
        if not od.ok:
            res = failed(Result, od, path=args.path, size_bytes=size)
            if "directory" in (od.stderr or "").lower():
                res.fix = "give the model file inside that directory, not the directory"
            return res
        head = parse_od(od.stdout)
    return Result.model_validate(
        {"host": host.name, "path": args.path, "size_bytes": size, **classify(head, size)}
    )


SPEC = ToolSpec(
    name="model_file",
    description=(
        "What a model file really is, from its size and first 64 bytes (read-only: stat and "
        "od): GGUF (version, tensor and metadata-key counts), safetensors (header size), a "
        "pre-GGUF GGML file, a Git LFS pointer, an HTML page saved as the model, empty or cut. "
        "Use it on 'invalid magic', 'is this really a GGML file', safetensors header errors or "
        "any loader that dies reading the weights file."
    ),
    args=Args,
    result=Result,
    fn=run,
)
