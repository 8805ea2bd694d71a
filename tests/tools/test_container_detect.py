"""`container_detect`'s parser: which container the engine processes live in, from the cgroup
lines each runtime writes (tools/container_runtimes.yaml), with the cases that must NOT be
claimed as a container: a host process, Pivot's own container, Podman's conmon, several places."""

from __future__ import annotations

import pytest

from tools.container_detect import MARK, container_of, parse, runtimes

ID = "ea52df35fb2edc65e2f39349989212ce5de97dcb6717ad3be217669daa662d30"
ID2 = "5a6ea55c1590dbb386b25410e5f7962bc00796c6d2fbd2fb5b262a6a51051c74"
VLLM = "python3 -m vllm.entrypoints.openai.api_server --model /models/x"
SGLANG = "python3 -m sglang.launch_server --model-path /models/y"


@pytest.mark.parametrize(
    ("line", "runtime", "cid"),
    [
        (f"0::/system.slice/docker-{ID}.scope", "docker", ID),
        (f"12:memory:/docker/{ID}", "docker", ID),
        (f"4:memory:/libpod_parent/libpod-{ID}", "podman", ID),
        (f"0::/machine.slice/libpod-{ID}.scope/container", "podman", ID),
        (f"0::/kubepods.slice/kubepods-burstable.slice/x/cri-containerd-{ID}.scope", "containerd", ID),
        (f"0::/kubepods.slice/kubepods-pod1.slice/crio-{ID}.scope", "cri-o", ID),
        (f"5:cpu:/kubepods/burstable/pod0f3c-11aa-22bb/{ID}", "kubernetes", ID),
        (f"0::/machine.slice/libpod-conmon-{ID}.scope", None, None),  # Podman's monitor
        ("4:memory:/process_api/c737593ba8d2a08b429a707fb06455bf", None, None),  # a sandbox
        ("0::/user.slice/user-1000.slice/session-3.scope", None, None),
        ("0::/", None, None),
    ],
)  # fmt: skip
def test_cgroup_line_names_its_runtime_and_id(
    line: str, runtime: str | None, cid: str | None
) -> None:
    got = container_of(line)
    assert (got[0], got[2]) == (runtime, cid) if got else (runtime, cid) == (None, None)


def read(
    ps: list[str], cgroups: dict[str, str], ns: dict[int, str] | None = None, names: str = ""
) -> str:
    """The tool's one shell read, as a host answers it."""
    out = [f"{MARK} self", "pid:[4026531836]", f"{MARK} ps", *ps, f"{MARK} ns"]
    out += [
        f"lrwxrwxrwx 1 root root 0 Jan 1 /proc/{p}/ns/pid -> {v}" for p, v in (ns or {}).items()
    ]
    out += [f"{MARK} cgroup", *(f"/proc/{p}/cgroup:{c}" for p, c in cgroups.items())]
    return "\n".join([*out, f"{MARK} names", names])


def test_engine_in_one_podman_container_is_detected_with_its_name() -> None:
    text = read(
        [f"  812 {VLLM}", f"  813 {VLLM}", "  900 bash"],
        {"812": f"4:memory:/libpod_parent/libpod-{ID}", "813": f"4:memory:/libpod_parent/libpod-{ID}"},
        {812: "pid:[4026532300]", 900: "pid:[4026531836]"},
        f"podman {ID} vllm-0\npodman {ID2} other",
    )  # fmt: skip
    res = parse(text, "gpu7")
    c = res.container
    assert c is not None and c.readable
    assert (c.runtime, c.cli, c.name, c.pid) == ("podman", "podman", "vllm-0", 812)
    assert res.engine_pids == [812, 813] and res.processes[0].other_pid_ns
    assert res.lines()[-1] == (
        "# the server runs in podman container vllm-0, detected from /proc/812/cgroup"
    )
    assert f"812 4:memory:/libpod_parent/libpod-{ID}" in res.lines()


def test_a_host_process_is_not_claimed_as_containerised() -> None:
    res = parse(read([f"  77 {VLLM}"], {}, {77: "pid:[4026531836]"}), "gpu7")
    assert res.container is None and res.undecided is None and res.engine_pids == [77]
    assert res.lines() == ["# engine processes [77] run on the host, in no container"]


def test_pivots_own_container_is_the_host() -> None:
    """Pivot itself in a container (a debug pod): processes of that same container are not
    'in a container' for this run."""
    line = f"0::/system.slice/docker-{ID}.scope"
    res = parse(read([f"  5 {VLLM}"], {"self": line, "5": line}), "node")
    assert res.container is None and res.undecided is None


def test_engines_on_the_host_and_in_a_container_are_left_to_the_operator() -> None:
    text = read(
        [f"  10 {VLLM}", f"  20 {SGLANG}"],
        {"20": f"0::/system.slice/docker-{ID2}.scope"},
        names=f"docker {ID2} sglang-a",
    )
    res = parse(text, "gpu7")
    assert res.container is None
    assert res.undecided is not None and "docker container sglang-a" in res.undecided
    assert "on the host ([10])" in res.undecided and "--container" in res.undecided


def test_engines_in_two_containers_are_left_to_the_operator() -> None:
    text = read(
        [f"  10 {VLLM}", f"  20 {SGLANG}"],
        {"10": f"0::/system.slice/docker-{ID}.scope", "20": f"0::/system.slice/docker-{ID2}.scope"},
        names=f"docker {ID} vllm-a\ndocker {ID2} sglang-b",
    )  # fmt: skip
    res = parse(text, "gpu7")
    assert res.container is None and res.undecided is not None
    assert "vllm-a" in res.undecided and "sglang-b" in res.undecided


def test_another_pid_namespace_without_a_known_cgroup_says_so() -> None:
    res = parse(read([f"  10 {VLLM}"], {}, {10: "pid:[4026532999]"}), "gpu7")
    assert res.container is None and res.undecided is not None
    assert "another pid namespace" in res.undecided


def test_a_kubernetes_container_is_named_but_not_readable() -> None:
    res = parse(read([f"  10 {VLLM}"], {"10": f"0::/kubepods/besteffort/pod1a/{ID}"}), "node")
    c = res.container
    assert c is not None and c.runtime == "kubernetes" and c.name is None and not c.readable


def test_no_engine_process_no_container() -> None:
    res = parse(read(["  1 /sbin/init", "  2 sleep 600 # vllm"], {}), "gpu7")
    assert res.container is None and res.engine_pids == []


def test_every_runtime_pattern_compiles_and_has_an_id_group() -> None:
    for r in runtimes().runtimes:
        assert "(?P<id>" in r.pattern, r
