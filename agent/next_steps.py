"""Next steps from facts: the real port, pid, arch and paths, and advice chosen by what the host
shows. A signature's next step is kept for what the facts do not say; its placeholders (PORT,
PID) are filled in when the facts know them, and dropped from the text when they do not.

Why: a canned "`ss -ltnp | grep :PORT`" when the port and its holder are known, or "stop the
process" when the holder is another team's live job, costs the engineer the time Pivot exists
to save.
"""

from __future__ import annotations

import re

from agent.evidence import text_lines
from agent.facts import Facts
from agent.server_port import server_port
from agent.state import Observation

PORT_IN_LINE = re.compile(r"(?:port[ =:]+|:|', )(\d{2,5})\b")
PID_IN_LINE = re.compile(r"pid=(\d+)")
#: a line about where something listens: only there is a colon-number a port
_ABOUT_PORTS = re.compile(r"(?i)\bport\b|\bbind|address|listen|https?://|serving on")
ARCH_LINE = re.compile(r"(?i)CUDA architectures|ARCH_LIST|major versions|no kernel image|sm_\d+")
ARCH_ENV = ("FLASHINFER_CUDA_ARCH_LIST", "TORCH_CUDA_ARCH_LIST", "CUDA_ARCH_LIST")


def _env(observations: list[Observation]) -> dict[str, str]:
    env: dict[str, str] = {}
    for o in observations:
        if not o["ok"]:
            continue
        for ln in text_lines(o):
            m = re.match(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]+)=(\S*)", ln)
            if m:
                env[m.group(1)] = m.group(2)
    return env


def _port(
    evidence: list[dict[str, str]], observations: list[Observation], facts: Facts | None = None
) -> int | None:
    for e in evidence:
        line = e.get("line", "")
        if not _ABOUT_PORTS.search(line):
            continue  # "max_split_size_mb:512", "custom_all_reduce.cuh:455": no port
        m = PORT_IN_LINE.search(line)
        if m and 1 <= int(m.group(1)) <= 65535:
            return int(m.group(1))
    return server_port(observations, facts)


def port_in_use(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    port = _port(evidence, observations, facts)
    if port is None:
        return None
    holder = facts.listeners.get(port, "")
    pid_m = PID_IN_LINE.search(holder)
    if pid_m:
        pid = int(pid_m.group(1))
        name = re.search(r'users:\(\("([^"]+)"', holder)
        cmd = str(facts._ps_recs.get(pid, {}).get("command") or "")
        who = cmd or (name.group(1) if name else "a process")
        if pid in facts.co_tenant_pids:
            return (
                f"Port {port} is held by pid {pid} ({facts.co_tenant_pids[pid]}): someone's live "
                f"job, do not stop it; launch on a free port (--port {port + 1}) instead."
            )
        return (
            f"Port {port} is held by pid {pid} ({who[:80]}). If it is a leftover of an earlier "
            f"launch, stop it (`kill {pid}`; check `ss -ltnp 'sport = :{port}'` shows it gone) and "
            f"relaunch; if it is a live server, launch on a free port (--port {port + 1})."
        )
    return (
        f"Find who holds port {port}: `sudo ss -ltnp 'sport = :{port}'` (sudo names other users' "
        f"processes); stop it if it is a leftover, or launch on a free port (--port {port + 1})."
    )


def stale_gpu_process(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    holders = {p: m for p, m in facts.gpu_pids.items() if p not in facts.server_pids and m >= 1}
    # a second instance of the same launch that torch's OOM names (a supervisor's restart while
    # the first still loads): the fix is to run one, not a bigger GPU
    from agent.rules.memory import duplicate_instances

    twins = duplicate_instances(facts, observations)
    parts = [
        f"pid {pid} is another instance of this launch "
        f"({str(facts._ps_recs.get(pid, {}).get('command') or '')[:70]}) "
        f"holding {gib:.1f} GiB: run one instance (stop the older one, `kill {pid}`, or stop the "
        "supervisor restarting it while it still loads)"
        for pid, gib in twins.items()
    ]
    from agent.launch import duplicate_mains, family

    mains = [p for p in duplicate_mains(observations, facts) if p not in twins]
    same = family(facts, mains)
    for pid in mains:
        kids = sorted(p for p in holders if p in same and p != pid)
        held = sum(holders.get(p, 0.0) for p in [pid, *kids])
        parts.append(
            f"pid {pid} runs this launch's own model "
            f"({str(facts._ps_recs.get(pid, {}).get('command') or '')[:70]}) and holds "
            f"{held / 1024:.1f} GiB"
            + (f" with its workers {', '.join(map(str, kids))}" if kids else "")
            + f": a second instance of the launch; run one (stop the older one, `kill {pid}`, "
            "and check its workers exit too)"
        )
    holders = {p: m for p, m in holders.items() if p not in same}
    if mains and any(p in facts.leftover_pids for p in holders):
        # with the launch's own twin named, other users' running jobs are not the holders
        holders = {
            p: m
            for p, m in holders.items()
            if not facts.co_tenant_pids.get(p, "").startswith("another user")
        }
    if not holders and not parts:
        return None
    for pid, mib in sorted(holders.items(), key=lambda x: -x[1])[:4]:
        if pid in facts.co_tenant_pids:
            parts.append(
                f"pid {pid} holds {mib / 1024:.1f} GiB and is {facts.co_tenant_pids[pid]}: a "
                "co-tenant, do not stop it; run on other GPUs (CUDA_VISIBLE_DEVICES) or size the "
                "launch to fit beside it (--mem-fraction-static / --gpu-memory-utilization)"
            )
        else:
            why = facts.leftover_pids.get(pid, "not part of this launch")
            parts.append(
                f"pid {pid} holds {mib / 1024:.1f} GiB ({why}): stop it (`kill {pid}`, "
                f"`kill -9 {pid}` if it ignores SIGTERM)"
            )
    return "; ".join(parts) + "; check `nvidia-smi` shows the memory free, then relaunch."


def unsupported_gpu_arch(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    from agent.rules.causes import arch_beyond_build, min_cuda_for

    beyond = arch_beyond_build(facts, observations)
    if beyond is not None:
        _, _, cc, cuda, top = beyond
        need = min_cuda_for(cc)
        toolkit = f"CUDA {need:.1f} or newer" if need else "a newer CUDA toolkit"
        return (
            f"The binary was built with CUDA {cuda:.1f}, which builds for compute capability "
            f"{top:.1f} at most; this GPU is {cc:.1f}, so the driver JIT-compiles every kernel "
            f"from PTX at first use (CPU-bound, the GPU idle) or has no kernel for it. Use a build "
            f"made with {toolkit} (a cu{str(need).replace('.', '') if need else ''} wheel or "
            "release, or rebuild with the new arch in CMAKE_CUDA_ARCHITECTURES / "
            "TORCH_CUDA_ARCH_LIST), then relaunch."
        )
    if not any(ARCH_LINE.search(e.get("line", "")) for e in evidence):
        return None
    env = _env(observations)
    caps = sorted(
        {
            str(g.get("compute_cap"))
            for o in observations
            if o["tool"] == "gpu_status" and o["ok"]
            for g in o["data"].get("gpus") or []
            if g.get("compute_cap")
        }
    )
    set_vars = [f"{k}={env[k]}" for k in ARCH_ENV if k in env]
    gpu = (
        f"this GPU's compute capability ({', '.join(caps)})"
        if caps
        else "this GPU's compute capability (nvidia-smi --query-gpu=compute_cap)"
    )
    have = (
        f" (set now: {', '.join(set_vars)})"
        if set_vars
        else " (none is set in the recorded environment)"
    )
    return (
        f"Check the arch list the JIT/kernels are built for: FLASHINFER_CUDA_ARCH_LIST and "
        f"TORCH_CUDA_ARCH_LIST{have} must include {gpu}; a list that misses it (or a wheel built "
        "for other archs) gives this error. Set it (e.g. FLASHINFER_CUDA_ARCH_LIST=9.0a), clear "
        "the JIT cache, and relaunch."
    )


def still_starting(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    dl = [o for o in observations if o["tool"] == "download_progress" and o["ok"]]
    if dl and dl[-1]["data"].get("downloading"):
        d = dl[-1]["data"]
        rate = (d.get("grew_bytes") or 0) / max(float(d.get("waited_s") or 0), 1e-3) / 2**20
        return (
            f"Nothing failed: the server is still downloading {d.get('model')} (~{rate:.0f} MiB/s "
            f"into {d.get('directory')}); let it finish (watch `du -sh` of that directory). For the "
            "next launch, download first (`huggingface-cli download MODEL`, hf_transfer) to local "
            "disk or a warm volume, point the server at it, and give the readiness probe a "
            "start-up budget that covers it."
        ).replace("MODEL", str(d.get("model")))
    io = [o for o in observations if o["tool"] == "process_io" and o["ok"]]
    if io and io[-1]["data"].get("reading"):
        d = io[-1]["data"]
        rate = float(d.get("read_mib") or 0) / max(float(d.get("waited_s") or 0), 1e-3)
        return (
            f"Nothing failed: pid {d.get('pid')} is still reading its files (~{rate:.0f} MiB/s "
            "from storage): do not kill it. If that rate is far below what the disk should give, "
            "the storage is the problem: check it (`iostat -x 5`, the kernel log for I/O errors, "
            "`smartctl`), or copy the model to local NVMe; give the readiness probe a start-up "
            "budget that covers the load."
        )
    for o in reversed(observations):
        p = o["data"].get("last_progress") if o["tool"] == "log_tail" and o["ok"] else None
        if p and p.get("eta_s"):
            mins = max(1, round(float(p["eta_s"]) / 60))
            each = f" at {float(p['s_per_item']):.1f} s each" if p.get("s_per_item") else ""
            return (
                f"Nothing failed: {p.get('label') or 'loading'} is at {p.get('done')}/{p.get('total')}"
                f"{each}: about "
                f"{mins} minute(s) left. Wait, and give the readiness probe a budget that covers it."
            )
    return None


def nccl_failure(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    from agent.rules.causes import missing_interface

    miss = missing_interface(observations)
    if miss is None:
        return _hang(facts, observations)
    _, _, var, value, ifaces = miss
    have = ", ".join(sorted(ifaces))
    return (
        f"The cause is the setting, not NCCL: {var}={value} names no interface of this host "
        f"(it has {have}). Unset {var} or set it to the interface the ranks reach each other on "
        f"(e.g. {var}={sorted(ifaces)[0]}), then relaunch; NCCL_DEBUG=INFO shows the one it picks."
    )


def _hang(facts: Facts, observations: list[Observation]) -> str | None:
    """A rank proven (by its stacks) to wait in a collective: name it and find the missing peer."""
    stacks = [o for o in observations if o["tool"] == "py_stacks" and o["ok"]]
    if not stacks or stacks[-1]["data"].get("waiting_in") != "collective":
        return None
    d = stacks[-1]["data"]
    pid = stacks[-1]["args"].get("pid")
    frame = str(d.get("collective_frame") or "").strip()
    peers = [p for p in facts.server_pids if p != pid]
    dumps = " ".join(f"`py-spy dump --pid {p}`" for p in peers[:4]) or "py-spy on every rank"
    return (
        f"Rank pid {pid} waits in a collective ({frame}); the hang is the rank that never joins "
        f"it. Dump the other ranks ({dumps}) to find the one that is elsewhere (or gone: check "
        "`ps` for each rank and `dmesg` for a kill); relaunch with NCCL_DEBUG=INFO to see which "
        "rank stops, and try NCCL_P2P_DISABLE=1 once as a test of the P2P path (ACS/IOMMU)."
    )


def killed_externally(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    """A rank gone while the rest of the launch still runs: the survivors wait for it forever
    and still hold their GPUs, so they must be stopped before a relaunch can have the GPUs."""
    gone = [r for r in facts.ranks if r.state != "alive" and r.rank in facts.ranks_gone]
    alive = [r for r in facts.ranks if r.state == "alive" and r.pid is not None]
    if facts.core_gone_line and facts.server_main_pids:
        entry = [
            p for p in facts.server_main_pids if facts._ps_recs.get(p, {}).get("role") == "main"
        ]
        mains = " ".join(map(str, (entry or facts.server_main_pids)[:2]))
        # workers left behind hold their GPUs: they go too
        left = " ".join(map(str, facts.server_worker_pids[:8]))
        kill = f"{mains} {left}".strip()
        return (
            f"The engine's core is gone and its front end (pid {mains}) still accepts requests "
            f"that nothing serves: restart the server (`kill {kill}`"
            + (": the front end and the workers left behind, which hold the GPUs" if left else "")
            + "), then relaunch, and find what "
            "ended the core (`sudo dmesg -T`, the supervisor's or Kubernetes events). Probe "
            "liveness with a real generation under a timeout, not /health, so a dead core is "
            "restarted by the orchestrator."
        )
    if not gone or not alive:
        return None
    names = ", ".join(f"rank {r.rank}" + (f" (pid {r.pid})" if r.pid else "") for r in gone)
    live = ", ".join(f"rank {r.rank} pid {r.pid}" for r in alive)
    tops = [p for p in facts.server_main_pids if p not in {r.pid for r in alive}]
    stop = (
        f"`kill {' '.join(map(str, tops[:2]))}` (the launcher, which ends its ranks)"
        if tops
        else (f"`kill {' '.join(str(r.pid) for r in alive[:4])}`")
    )
    return (
        f"{names} is gone and {live} still runs, waiting for it (it holds its GPU and will never "
        f"finish): stop what is left of the launch ({stop}; check `nvidia-smi` shows the GPUs "
        "free), find who ended the rank, and relaunch."
    )


CUDA_INIT = re.compile(
    r"(?i)no CUDA GPUs are available|CUDA driver initialization failed|found no NVIDIA driver|"
    r"cudaGetDeviceCount|Torch not compiled with CUDA|CUDA initialization"
)


def cuda_driver_mismatch(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    """A CUDA init error where nvidia-smi itself is missing or has no driver: the process (often a
    container) was started without GPU access, not with the wrong driver."""
    status = next(
        (o["data"].get("status") for o in reversed(observations) if o["tool"] == "gpu_status"), None
    )
    if status not in ("no_nvidia_smi", "no_driver"):
        return None
    if not any(CUDA_INIT.search(e.get("line", "")) for e in evidence):
        return None
    return (
        "This process sees no GPU at all (nvidia-smi: "
        + ("not installed" if status == "no_nvidia_smi" else "no driver")
        + "): in a container, start it with GPU access (`docker run --gpus all` / the NVIDIA "
        "container runtime, or a Kubernetes `nvidia.com/gpu` limit) and check `ls /dev/nvidia*`; on "
        "the host, install or load the driver (`nvidia-smi` must answer) before relaunching."
    )


def bad_launch_argument(facts: Facts, observations: list[Observation], evidence) -> str | None:  # type: ignore[no-untyped-def]
    from agent.hits import signature_hits
    from agent.rules.causes import (
        draftless,
        hidden_gpus,
        interfaces,
        loopback_across_nodes,
        proxied_own_request,
        setting_conflict,
        unresolvable_rendezvous,
        unset_devices,
    )

    conflict = setting_conflict(observations)
    if conflict is not None:
        entry, _, setting, _, _ = conflict
        shown = setting.strip().strip('"')
        fix = " ".join(entry.fix.split())
        return f"The launch sets {shown}, which breaks the engine here: {fix}; then relaunch."
    if draftless(observations, signature_hits(observations)) is not None:
        return (
            "Speculative decoding is on without a draft model: pass --speculative-draft-model-path "
            "with a draft head trained for this target model (an EAGLE/EAGLE3 checkpoint), or drop "
            "--speculative-algorithm (models with their own MTP layers use NEXTN and need none), "
            "then relaunch."
        )
    hid = hidden_gpus(facts, observations)
    if hid is not None:
        _, _, found, on_host, var, value = hid
        return (
            f"{var}={value} shows the server {found} of the {on_host} GPUs: remove it from the "
            f"launch environment (unit file `Environment=`, container env, shell profile) or list "
            f"every GPU it should use (e.g. {var}={','.join(map(str, range(on_host)))}), restart the "
            "service, and check the engine's log reports all of them."
        )
    unset = unset_devices(observations)
    if unset is not None:
        soid, sline, _, _, why = unset
        path = next(
            (str(o["args"].get("path") or "") for o in observations if o["id"] == soid), "its file"
        )
        return (
            f"`{sline.strip()}` in {path} hides every GPU ({why}): export the variable before the "
            "launcher sources the file (or write the device list there, e.g. "
            f"CUDA_VISIBLE_DEVICES={','.join(map(str, range(max(1, len(facts.gpus)))))}), relaunch, and "
            "check the engine's log reports the GPUs."
        )
    lo = loopback_across_nodes(observations)
    if lo is not None:
        gloo = "Gloo" in lo[1] or "GLOO" in lo[1]
        var = "GLOO_SOCKET_IFNAME" if gloo else "NCCL_SOCKET_IFNAME"
        ifaces = sorted(i for i in interfaces(observations) if i != "lo")
        name = ifaces[0] if len(ifaces) == 1 else "<the interface the nodes share>"
        return (
            f"The ranks advertise the loopback address to the other node(s) ({lo[2]}): set "
            f"{var}={name} on every node"
            + (" (Gloo ignores NCCL_SOCKET_IFNAME)" if gloo else "")
            + ", or make this node's hostname resolve to that interface's address (`getent hosts "
            "$(hostname)` must not print 127.x / nothing; add it to /etc/hosts), then relaunch "
            "every node."
        )
    unres = unresolvable_rendezvous(observations)
    if unres is not None:
        host = unres[2]
        return (
            f"The rendezvous host {host} does not resolve on this node (`getent hosts {host}` "
            "prints nothing): set MASTER_ADDR / --dist-init-addr to rank 0's IP address (`hostname "
            "-I` on rank 0's node) or a name every node resolves (DNS, /etc/hosts), then relaunch "
            "every rank."
        )
    hit = proxied_own_request(observations)
    if hit is None:
        return None
    _, _, host, no_proxy = hit
    have = f"no_proxy={no_proxy}" if no_proxy else "no_proxy is unset"
    wanted = ",".join(dict.fromkeys([*(e for e in no_proxy.split(",") if e), host, "localhost"]))
    return (
        f"The server's own requests to {host} go through the HTTP proxy ({have}): export "
        f"no_proxy={wanted} (and NO_PROXY the same) in the launch environment, or unset "
        "http_proxy/https_proxy there (keep a proxy only for the model download), then relaunch."
    )


BY_LABEL = {
    "bad_launch_argument": bad_launch_argument,
    "cuda_driver_mismatch": cuda_driver_mismatch,
    "killed_externally": killed_externally,
    "nccl_failure": nccl_failure,
    "port_in_use": port_in_use,
    "stale_gpu_process": stale_gpu_process,
    "unsupported_gpu_arch": unsupported_gpu_arch,
    "still_starting": still_starting,
}


def from_facts(
    label: str, facts: Facts, observations: list[Observation], evidence: list[dict[str, str]]
) -> str | None:
    if facts.container is not None:
        # a container's limits are set on its run command: say it in those terms, never the host's
        from agent import containers

        port = _port(evidence, observations, facts)
        step = containers.next_step(label, facts.container, facts.container_cli, port)
        notes = containers.notes(facts.container, facts.container_cli, port)
        if step or notes:
            rest = BY_LABEL.get(label)
            first = step or (rest(facts, observations, evidence) if rest else None) or ""
            return " ".join([first, *notes]).strip()
    fn = BY_LABEL.get(label)
    return fn(facts, observations, evidence) if fn else None


def fill(text: str, facts: Facts, observations: list[Observation], evidence) -> str:  # type: ignore[no-untyped-def]
    """Put the known port/pid into a signature's generic text; never leave a bare placeholder."""
    port = _port(evidence, observations, facts)
    if port is not None:
        text = re.sub(r"\bPORT\b", str(port), text)
    else:
        text = (
            re.sub(r"\s*\|\s*grep :PORT", "", text).replace(":PORT", "").replace("PORT", "the port")
        )
    return text
