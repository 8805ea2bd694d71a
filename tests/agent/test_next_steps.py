"""Next steps are built from the facts: the real port and pid, co-tenants left alone, the arch list."""

from __future__ import annotations

from agent.facts import Facts
from agent.next_steps import fill, from_facts
from agent.state import Observation


def _obs(oid: str, tool: str, lines: list[str], data: dict | None = None) -> Observation:
    return Observation(id=oid, tool=tool, args={}, ok=True, lines=lines, data=data or {}, round=0)


BIND = "OSError: [Errno 98] error while attempting to bind on address ('0.0.0.0', 30000): address already in use"


def test_port_and_holder_are_named_and_a_leftover_may_be_stopped() -> None:
    f = Facts(
        listeners={30000: 'LISTEN 0 2048 0.0.0.0:30000 0.0.0.0:* users:(("python3",pid=812,fd=9))'}
    )
    f.procs = {812: "root 812 python3 -m sglang.launch_server --port 30000"}
    text = from_facts("port_in_use", f, [], [{"observation": "o8", "line": BIND}])
    assert text and "30000" in text and "kill 812" in text and "PORT" not in text


def test_a_co_tenant_holding_the_port_is_never_to_be_killed() -> None:
    f = Facts(listeners={30000: 'LISTEN 0 2048 *:30000 *:* users:(("python3",pid=812,fd=9))'})
    f.co_tenant_pids = {812: "another user's job (alice)"}
    text = from_facts("port_in_use", f, [], [{"observation": "o8", "line": BIND}]) or ""
    assert "do not stop it" in text and "kill" not in text and "--port 30001" in text


def test_a_co_tenant_gpu_holder_gets_fit_beside_it_advice() -> None:
    f = Facts(gpu_pids={4242: 80_000.0})
    f.co_tenant_pids = {4242: "another user's job (bob)"}
    text = from_facts("stale_gpu_process", f, [], []) or ""
    assert "co-tenant" in text and "kill" not in text and "CUDA_VISIBLE_DEVICES" in text


def test_arch_error_points_at_the_arch_lists_and_the_gpu_capability() -> None:
    obs = [
        _obs("o1", "gpu_status", ["0, NVIDIA H200, ..."], {"gpus": [{"compute_cap": "9.0"}]}),
        _obs("o2", "host_facts", ["TORCH_CUDA_ARCH_LIST=8.0;8.6"]),
    ]
    line = "RuntimeError: No supported CUDA architectures found for major versions [9, 10]."
    text = (
        from_facts("unsupported_gpu_arch", Facts(), obs, [{"observation": "o3", "line": line}])
        or ""
    )
    assert "FLASHINFER_CUDA_ARCH_LIST" in text and "TORCH_CUDA_ARCH_LIST=8.0;8.6" in text
    assert "compute capability (9.0)" in text and "supported major version" not in text


def test_signature_placeholders_are_filled_or_dropped() -> None:
    generic = "`ss -ltnp | grep :PORT` to find the holder; stop it or launch on a free --port."
    assert ":30000" in fill(generic, Facts(), [], [{"line": BIND}])
    assert "PORT" not in fill(generic, Facts(), [], [{"line": "Address already in use"}])


def test_an_iface_env_naming_a_missing_interface_is_the_cause_behind_nccl() -> None:
    obs = [
        _obs(
            "o6",
            "host_facts",
            [
                "# $ ip -brief link  (ok)",
                "lo  UNKNOWN  00:00 <LOOPBACK>",
                "eth0  UP  06:0c <BROADCAST,UP>",
            ],
        ),
        _obs(
            "o8",
            "log_tail",
            ["vm:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to ens9f0"],
        ),
    ]
    text = from_facts("nccl_failure", Facts(), obs, []) or ""
    assert "NCCL_SOCKET_IFNAME=ens9f0" in text and "eth0" in text and "Unset" in text
    ok = [obs[0], _obs("o8", "log_tail", ["NCCL_SOCKET_IFNAME=eth"])]  # a prefix of eth0: fine
    assert from_facts("nccl_failure", Facts(), ok, []) is None


def test_a_cuda_init_error_without_nvidia_smi_is_a_container_without_gpus() -> None:
    obs = [_obs("o1", "gpu_status", [], {"status": "no_nvidia_smi"})]
    line = "RuntimeError: No CUDA GPUs are available"
    text = from_facts("cuda_driver_mismatch", Facts(), obs, [{"line": line}]) or ""
    assert "--gpus all" in text and "/dev/nvidia" in text


def test_a_rank_1_node_told_to_meet_rank_0_at_its_own_address_is_a_launch_setting() -> None:
    from agent.rules.causes import rendezvous_self

    addr = _obs(
        "o6", "host_facts", ["# $ ip -brief addr  (ok)", "eth0  UP  10.0.0.2/24 fe80::1/64"]
    )
    ps = _obs(
        "o2",
        "processes",
        [
            "root 1 0.2 0.1 1 1 ? Sl 10:02 0:03 python -m sglang.launch_server --nccl-init 10.0.0.2:8001 --nnodes 2 --node-rank 1"
        ],
    )
    assert rendezvous_self([addr, ps]) == ("o2", ps["lines"][0], "10.0.0.2", 1)
    rank0 = _obs("o2", "processes", [ps["lines"][0].replace("--node-rank 1", "--node-rank 0")])
    assert rendezvous_self([addr, rank0]) is None  # rank 0 hosts the rendezvous: fine
