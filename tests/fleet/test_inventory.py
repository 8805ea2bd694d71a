"""The fleet inventory: ~/.ssh/config aliases plus fleet.yaml groups, refused clearly when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.inventory import InventoryError, load_inventory

SSH_CONFIG = """\
Host node-1
  HostName 10.0.0.1
Host node-2 node-3
  HostName %h.example
Host a100-1
  Port 2222
Host *.internal
  User ops
Host * !bastion
  ServerAliveInterval 30
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(SSH_CONFIG)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("groups:\n  h200: [node-1, node-2]\n  all-gpu: [h200, a100-1, node-2]\n")
    return fleet, cfg


def test_aliases_come_from_ssh_config_without_patterns(files: tuple[Path, Path]) -> None:
    inv = load_inventory(*files)
    assert inv.aliases == ["a100-1", "node-1", "node-2", "node-3"]


def test_groups_and_lists_expand_in_order_once_each(files: tuple[Path, Path]) -> None:
    inv = load_inventory(*files)
    assert inv.expand("h200") == ["node-1", "node-2"]
    assert inv.expand("all-gpu") == ["node-1", "node-2", "a100-1"]
    assert inv.expand("node-3, h200 ,node-1") == ["node-3", "node-1", "node-2"]


def test_unknown_alias_names_what_is_known(files: tuple[Path, Path]) -> None:
    inv = load_inventory(*files)
    with pytest.raises(InventoryError) as exc:
        inv.expand("node-1,node-9")
    msg = str(exc.value)
    assert "'node-9'" in msg and "h200" in msg and "node-3" in msg and "~/.ssh/config" in msg


def test_unknown_member_of_a_group_names_the_group(files: tuple[Path, Path]) -> None:
    fleet, cfg = files
    fleet.write_text("groups:\n  h200: [node-1, node-7]\n")
    with pytest.raises(InventoryError, match=r"'node-7' \(in group 'h200'"):
        load_inventory(fleet, cfg).expand("h200")


def test_a_group_that_includes_itself_is_refused(files: tuple[Path, Path]) -> None:
    fleet, cfg = files
    fleet.write_text("groups:\n  a: [b]\n  b: [a]\n")
    with pytest.raises(InventoryError, match="a -> b -> a"):
        load_inventory(fleet, cfg).expand("a")


@pytest.mark.parametrize(
    "text, words",
    [
        ("groups: {h200: []}\n", "is empty"),
        ("groups: {h200: node-1}\n", "valid list"),
        ("hosts: [node-1]\n", "Extra inputs"),
        ("groups: {h200: [node-1\n", "not a valid fleet file"),
        ("groups: {node-1: [node-2]}\n", "both a group and an SSH alias"),
    ],
)
def test_a_broken_fleet_file_is_an_error_that_says_why(
    files: tuple[Path, Path], text: str, words: str
) -> None:
    fleet, cfg = files
    fleet.write_text(text)
    with pytest.raises(InventoryError, match=words):
        load_inventory(fleet, cfg)


def test_no_fleet_file_means_aliases_only(tmp_path: Path, files: tuple[Path, Path]) -> None:
    inv = load_inventory(tmp_path / "absent.yaml", files[1])
    assert inv.groups == {} and inv.expand("node-2") == ["node-2"]
    with pytest.raises(InventoryError, match="--hosts needs"):
        inv.expand(" , ")


def test_alias_colon_container_targets_expand_through_groups(files: tuple[Path, Path]) -> None:
    fleet, cfg = files
    fleet.write_text("groups:\n  h200: [node-1, node-2]\n  vllm: [node-1:vllm-0, a100-1]\n")
    inv = load_inventory(fleet, cfg)
    assert inv.expand("node-3:vllm-0,h200:sglang") == [
        "node-3:vllm-0",
        "node-1:sglang",
        "node-2:sglang",
    ]
    assert inv.expand("vllm") == ["node-1:vllm-0", "a100-1"]
    with pytest.raises(InventoryError, match="already names its containers"):
        inv.expand("vllm:other")
    with pytest.raises(InventoryError, match="container name"):
        inv.expand("node-1:bad name")
    with pytest.raises(InventoryError, match="'node-9'"):
        inv.expand("node-9:vllm-0")
