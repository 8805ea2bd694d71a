"""`packages`: which torch / CUDA / NCCL / engine versions the host's Python actually has.

Version skew (a CUDA 12.4 wheel on a 12.1 driver, a TensorRT engine built by another TRT) is a
root cause the agent must be able to check in one call. The probe is one `python3 -c` script
that reads package metadata only (torch's import takes seconds; its version.py is read as
text), prints one JSON object and never fails on a missing package. When Python cannot run
the probe, `pip list --format=freeze` (or `pip show` blocks) is parsed instead.
"""

from __future__ import annotations

import json
import re
import shlex

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec, bound_lines
from tools.host import Host

#: Distribution names probed, by the key the agent sees. First installed name wins.
PACKAGES: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "sglang": ("sglang",),
    "vllm": ("vllm",),
    "flashinfer": ("flashinfer-python", "flashinfer"),
    "triton": ("triton", "pytorch-triton"),
    "tensorrt": ("tensorrt", "tensorrt-cu12", "tensorrt-cu13"),
    "tensorrt_llm": ("tensorrt-llm", "tensorrt_llm"),
    "transformers": ("transformers",),
    "nccl": ("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
    "cuda_runtime": ("nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime"),
}

#: Runs on the host with nothing but the standard library. Kept free of single quotes so it
#: travels inside one shell-quoted argument. IMPORT_TORCH is substituted before sending.
PROBE_SCRIPT = r"""
import json, sys, os, re
from importlib import metadata, util
PKGS = __PKGS__
out = {"python": sys.version.split()[0], "executable": sys.executable, "versions": {}}
for key, names in PKGS.items():
    for name in names:
        try:
            out["versions"][key] = metadata.version(name)
            break
        except Exception:
            pass
try:
    spec = util.find_spec("torch")
    if spec and spec.submodule_search_locations:
        src = open(os.path.join(list(spec.submodule_search_locations)[0], "version.py")).read()
        m = re.search(r"^cuda\s*(?::\s*\S+)?\s*=\s*[\x27\x22]([^\x27\x22]+)", src, re.M)
        if m:
            out["torch_cuda"] = m.group(1)
except Exception as exc:
    out["torch_cuda_error"] = repr(exc)[:200]
if __IMPORT_TORCH__ and "torch" in out["versions"]:
    try:
        import torch
        out["torch_cuda"] = torch.version.cuda
        out["nccl_runtime"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        out["cuda_available"] = torch.cuda.is_available()
        if out["cuda_available"]:
            out["compute_cap"] = ".".join(str(x) for x in torch.cuda.get_device_capability(0))
            out["arch_list"] = torch.cuda.get_arch_list()
    except Exception as exc:
        out["torch_import_error"] = repr(exc)[:300]
print(json.dumps(out, sort_keys=True))
"""

_PY_PATH = re.compile(r"^[A-Za-z0-9_./+-]+$")


class Args(BaseModel):
    python: str = Field(
        "python3",
        description="the interpreter the server runs under (e.g. /opt/venv/bin/python)",
        pattern=_PY_PATH.pattern,
    )
    import_torch: bool = Field(
        False,
        description="also import torch for the NCCL runtime version, CUDA availability and "
        "arch list (slow: seconds)",
    )
    timeout_s: float = Field(60.0, gt=0, le=300)


class ProbeOutput(BaseModel):
    """What the probe (or a pip listing) says, before the driver and nvcc are added."""

    python: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    torch_cuda: str | None = None
    nccl_runtime: str | None = None
    cuda_available: bool | None = None
    compute_cap: str | None = None
    arch_list: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    raw_lines: list[str] = Field(default_factory=list)


class Result(ToolResult):
    python: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    torch_cuda: str | None = Field(None, description="CUDA version torch was built for")
    nccl_runtime: str | None = Field(None, description="torch.cuda.nccl.version(), if imported")
    cuda_available: bool | None = None
    compute_cap: str | None = None
    arch_list: list[str] = Field(default_factory=list)
    nvcc: str | None = Field(None, description="nvcc release, e.g. 13.0")
    driver_version: str | None = None
    source: str = Field("probe", description="probe | pip | none")
    notes: list[str] = Field(default_factory=list)
    raw_lines: list[str] = Field(default_factory=list)

    def lines(self) -> list[str]:
        out = [*self.raw_lines]
        if self.versions:
            out.append("# " + ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items())))
        elif self.ok:
            out.append(
                f"# none of {', '.join(PACKAGES)} is installed for {self.python or 'python'}"
            )
        facts = [
            f"torch built for CUDA {self.torch_cuda}" if self.torch_cuda else "",
            f"nvcc {self.nvcc}" if self.nvcc else "",
            f"driver {self.driver_version}" if self.driver_version else "",
            f"NCCL runtime {self.nccl_runtime}" if self.nccl_runtime else "",
        ]
        if any(facts):
            out.append("# " + "; ".join(f for f in facts if f))
        out += [f"# note: {n}" for n in self.notes]
        return bound_lines(out + super().lines())


def probe_command(python: str = "python3", import_torch: bool = False) -> str:
    script = PROBE_SCRIPT.replace("__PKGS__", repr({k: list(v) for k, v in PACKAGES.items()}))
    script = script.replace("__IMPORT_TORCH__", "True" if import_torch else "False")
    return f"{python} -c {shlex.quote(script)}"


def parse_probe(text: str) -> ProbeOutput:
    """The probe's JSON line; anything else (a card's other python output) yields nothing."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if not isinstance(data, dict):
            continue
        versions = data.get("versions")
        versions = (
            {str(k): str(v) for k, v in versions.items()} if isinstance(versions, dict) else {}
        )
        arch = data.get("arch_list")
        notes = [
            f"{k}: {data[k]}" for k in ("torch_import_error", "torch_cuda_error") if data.get(k)
        ]
        avail = data.get("cuda_available")
        return ProbeOutput(
            python=_str(data.get("python")),
            versions=versions,
            torch_cuda=_str(data.get("torch_cuda")),
            nccl_runtime=_str(data.get("nccl_runtime")),
            cuda_available=avail if isinstance(avail, bool) else None,
            compute_cap=_str(data.get("compute_cap")),
            arch_list=[str(a) for a in arch] if isinstance(arch, list) else [],
            notes=notes,
            raw_lines=[line],
        )
    return ProbeOutput()


_FREEZE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:==|\s)\s*([0-9][^\s]*)\s*$")
_SHOW = re.compile(r"^(Name|Version):\s*(\S+)\s*$")


def parse_pip_list(text: str) -> ProbeOutput:
    """`pip list --format=freeze` lines (`name==1.2`), `pip list` columns, or `pip show` blocks."""
    found: dict[str, str] = {}
    raw: list[str] = []
    show_name: str | None = None
    for line in text.splitlines():
        m = _SHOW.match(line.strip())
        if m:
            if m.group(1) == "Name":
                show_name = m.group(2)
            elif show_name:
                found[_norm(show_name)] = m.group(2)
                raw.append(f"{show_name}=={m.group(2)}")
                show_name = None
            continue
        m = _FREEZE.match(line.strip())
        if m:
            found[_norm(m.group(1))] = m.group(2)
            if any(_norm(m.group(1)) in map(_norm, names) for names in PACKAGES.values()):
                raw.append(line.strip())
    versions: dict[str, str] = {}
    for key, names in PACKAGES.items():
        for name in names:
            if _norm(name) in found:
                versions[key] = found[_norm(name)]
                break
    torch_cuda = None
    m = re.search(r"\+cu(\d+)(\d)$", versions.get("torch", ""))
    if m:
        torch_cuda = f"{m.group(1)}.{m.group(2)}"
    return ProbeOutput(versions=versions, torch_cuda=torch_cuda, raw_lines=raw)


_DRIVER = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+\.\d+(?:\.\d+)?)")
_NVCC = re.compile(r"release (\d+\.\d+), V(\S+)")


def parse_driver_version(text: str) -> str | None:
    """/proc/driver/nvidia/version: 'NVRM version: NVIDIA UNIX ... Kernel Module  580.159.04 ...'."""
    m = _DRIVER.search(text)
    return m.group(1) if m else None


def parse_nvcc(text: str) -> str | None:
    m = _NVCC.search(text)
    return m.group(1) if m else None


def run(host: Host, args: Args) -> Result:
    notes: list[str] = []
    raw: list[str] = []
    res = host.run(probe_command(args.python, args.import_torch), timeout=args.timeout_s)
    probe = parse_probe(res.stdout) if res.ok else ProbeOutput()
    source = "probe"
    if not probe.versions and probe.python is None:
        if res.ok:
            notes.append(f"{args.python} ran but printed no probe JSON")
        else:
            notes.append(f"probe failed: {(res.error or res.stderr or '').strip()[:200]}")
        # The real H200's `pip` belonged to another Python than `python3`: ask the interpreter.
        errors = []
        show = (
            "pip show torch vllm sglang tensorrt_llm tensorrt flashinfer-python triton transformers"
        )
        for cmd in (f"{args.python} -m pip list --format=freeze", "pip list --format=freeze", show):
            pip = host.run(cmd, timeout=args.timeout_s)
            probe = parse_pip_list(pip.stdout) if pip.ok else ProbeOutput()
            if probe.versions:
                break
            errors.append(f"{cmd}: " + ("no known packages" if pip.ok else f"rc {pip.rc}"))
        source = "pip" if probe.versions else "none"
        if not probe.versions:
            notes += errors
    raw += probe.raw_lines

    drv = host.run("cat /proc/driver/nvidia/version", timeout=10)
    driver = parse_driver_version(drv.stdout) if drv.ok else None
    if driver:
        raw += [ln for ln in drv.stdout.splitlines() if "Kernel Module" in ln][:1]
    nv = host.run("nvcc --version", timeout=10)
    if not nv.ok:
        nv = host.run("/usr/local/cuda/bin/nvcc --version", timeout=10)
    nvcc = parse_nvcc(nv.stdout) if nv.ok else None
    if nvcc:
        raw += [ln for ln in nv.stdout.splitlines() if "release" in ln][:1]

    if source == "none":
        return Result(
            host=host.name,
            ok=False,
            error=f"cannot read Python package versions on {host.name}: "
            f"{args.python!r} probe and pip list both failed",
            fix="pass python=<path of the server's interpreter> (its venv or conda env)",
            driver_version=driver,
            nvcc=nvcc,
            source=source,
            notes=notes + probe.notes,
            raw_lines=raw,
        )
    return Result(
        host=host.name,
        python=probe.python,
        versions=probe.versions,
        torch_cuda=probe.torch_cuda,
        nccl_runtime=probe.nccl_runtime,
        cuda_available=probe.cuda_available,
        compute_cap=probe.compute_cap,
        arch_list=probe.arch_list,
        nvcc=nvcc,
        driver_version=driver,
        source=source,
        notes=notes + probe.notes,
        raw_lines=raw,
    )


def _str(v: object) -> str | None:
    return None if v is None else str(v)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


SPEC = ToolSpec(
    name="packages",
    description=(
        "Versions on the host's Python: torch (and the CUDA it was built for), NCCL, sglang, "
        "vllm, flashinfer, triton, tensorrt, tensorrt_llm, transformers; plus the NVIDIA driver "
        "(/proc/driver/nvidia/version) and nvcc. Use it to check CUDA/driver/library skew and "
        "'undefined symbol' or engine-version errors. Set python= to the server's interpreter."
    ),
    args=Args,
    result=Result,
    fn=run,
)
