"""find_logs: one real `find` on a temp tree, the replay path, and the pure parsers."""

from __future__ import annotations

import os
from pathlib import Path

from cards.model import load_card
from cards.replay import ReplayHost
from tools.find_logs import Args, build_command, classify, parse_find, run
from tools.local_host import LocalHost

ROOT = Path(__file__).resolve().parents[2]


def _card(card_id: str) -> Path:
    for base in (ROOT / "evals" / "incidents",):
        if (base / f"{card_id}.yaml").exists():
            return base / f"{card_id}.yaml"
    raise AssertionError(f"card {card_id} not found")


def _touch(path: Path, mtime: float, body: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(body)
    os.utime(path, (mtime, mtime))


def test_finds_logs_newest_first_and_configs_separately(tmp_path: Path) -> None:
    t = 1_700_000_000
    _touch(tmp_path / "logs" / "old.log", t)
    _touch(tmp_path / "logs" / "new.log", t + 100, "hello\n")
    _touch(tmp_path / "run" / "nohup.out", t + 50)
    _touch(tmp_path / "logs" / "notes.txt", t + 10)
    _touch(tmp_path / "notes.txt", t + 10)  # not under logs/
    _touch(tmp_path / "model.bin", t + 200)
    _touch(tmp_path / ".git" / "x.log", t + 300)  # hidden dir: never
    _touch(tmp_path / "a" / "b" / "c" / "d" / "e" / "deep.log", t + 400)  # past max_depth
    _touch(tmp_path / "sitecustomize.py", t)
    _touch(tmp_path / ".env", t)
    _touch(tmp_path / "launch.sh", t)
    _touch(tmp_path / "config" / "engine.json", t)
    _touch(tmp_path / "weights.json", t)  # JSON outside a config dir: not a config
    res = run(LocalHost(), Args(roots=[str(tmp_path)], max_depth=4))
    assert res.ok, res.error
    logs = [f.path for f in res.logs]
    assert logs == [
        str(tmp_path / "logs" / "new.log"),
        str(tmp_path / "run" / "nohup.out"),
        str(tmp_path / "logs" / "notes.txt"),
        str(tmp_path / "logs" / "old.log"),
    ]
    assert res.logs[0].size == 6 and res.logs[0].mtime == t + 100
    configs = {Path(f.path).name for f in res.configs}
    assert configs == {"sitecustomize.py", ".env", "launch.sh", "engine.json"}
    only = run(LocalHost(), Args(roots=[str(tmp_path)], kind="configs", limit=2))
    assert not only.logs and len(only.configs) == 2


def test_missing_roots_are_not_an_error(tmp_path: Path) -> None:
    _touch(tmp_path / "server.log", 1_700_000_000)
    res = run(LocalHost(), Args(roots=["/no/such/root", str(tmp_path)]))
    assert res.ok and [f.path for f in res.logs] == [str(tmp_path / "server.log")]


def test_replay_card_answers_with_its_paths() -> None:
    host = ReplayHost(load_card(_card("seed-sglang-fusion-sm120-jit")))
    res = run(host, Args())
    assert [f.path for f in res.logs] == [
        "/data/eagle3/synth_100k/logs/nccl_exp_1b_fewchan_fusion.log"
    ]
    assert "/usr/lib/python3.12/sitecustomize.py" in [f.path for f in res.configs]
    assert res.logs[0].mtime is None
    assert res.lines()[2] == "/data/eagle3/synth_100k/logs/nccl_exp_1b_fewchan_fusion.log"


def test_parse_find_both_shapes() -> None:
    rows = parse_find("1700000000.5 42 /var/log/a b.log\n/data/x.log\n\n")
    assert rows[0][:3] == (1700000000.5, 42, "/var/log/a b.log")
    assert rows[1][:3] == (None, None, "/data/x.log")


def test_classify() -> None:
    assert classify("/tmp/nohup.out") == "log"
    assert classify("/data/logs/run.txt") == "log"
    assert classify("/usr/local/lib/python3.12/dist-packages/sitecustomize.py") == "config"
    assert classify("/usr/lib/python3/dist-packages/foo/run.sh") is None
    assert classify("/app/start.sh") == "config"
    assert classify("/data/models/x/config.json") is None
    assert classify("/opt/app/configs/serve.json") == "config"


def test_command_is_one_find_with_home_expanded() -> None:
    cmd = build_command(Args(roots=["~/logs", "/usr/lib/python3*", "/odd dir"]))
    assert cmd.startswith("LC_ALL=C find \"$HOME\"/logs /usr/lib/python3* '/odd dir' -maxdepth 4")
    assert cmd.count("find ") == 1 and "-printf '%T@ %s %p\\n'" in cmd


def test_the_walk_from_slash_skips_the_roots_walked_on_their_own(tmp_path: Path) -> None:
    """With "/" among the roots, "/" is spelled "//" so `-path //tmp -prune` skips only that walk's
    copy of /tmp (the walk rooted at /tmp keeps it whole); the "//" is read back as "/"."""
    cmd = build_command(Args(roots=["/tmp", "~", "/usr/lib/python3*", "/"], max_depth=6))
    assert cmd.startswith('LC_ALL=C find /tmp "$HOME" /usr/lib/python3* // -maxdepth 6')
    assert "-path //tmp " in cmd and "-path //proc " in cmd and "-path /proc " in cmd
    assert "-path //usr/lib/python3" not in cmd and '-path //"$HOME"' not in cmd
    assert build_command(Args(roots=["/"])).startswith("LC_ALL=C find / -maxdepth")
    rows = parse_find("1700000000.5 42 //work/x/serve.log\n1700000000.5 42 /tmp/a.log\n")
    assert [(r[2], r[3]) for r in rows] == [
        ("/work/x/serve.log", "1700000000.5 42 /work/x/serve.log"),
        ("/tmp/a.log", "1700000000.5 42 /tmp/a.log"),
    ]
    # for real: the same files as walking "/" and the roots each in full, each listed once
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "deep.log").write_text("x\n")
    (tmp_path / "top.log").write_text("x\n")
    res = run(LocalHost(), Args(roots=[str(tmp_path), "/"], max_depth=3, kind="logs", limit=200))
    mine = sorted(f.path for f in res.logs if f.path.startswith(str(tmp_path)))
    assert mine == [str(tmp_path / "a" / "b" / "deep.log"), str(tmp_path / "top.log")]
    assert len({f.path for f in res.logs}) == len(res.logs)
    assert all(not f.path.startswith("//") and " //" not in f.line for f in res.logs)


def test_teed_txt_output_is_a_log_candidate_after_the_named_logs(tmp_path: Path) -> None:
    """`| tee all_reduce_4_gpus.txt` is where a launch's output often is; it is listed, but after
    every named log even when newer, and text files that are not output never are."""
    t = 1_700_000_000
    _touch(tmp_path / "server.log", t)
    _touch(tmp_path / "all_reduce_4_gpus.txt", t + 500, "# nThread 1 nGpus 4\n")
    _touch(tmp_path / "requirements.txt", t + 600, "torch\n")
    _touch(tmp_path / "README.txt", t + 600)
    r = run(LocalHost(), Args(roots=[str(tmp_path)], kind="logs"))
    assert r.ok, r.lines()
    assert [Path(f.path).name for f in r.logs] == ["server.log", "all_reduce_4_gpus.txt"]
    assert classify("/workspace/requirements.txt") is None
    assert classify("/tmp/modal-container.txt") == "log"


def test_toolchain_and_kernel_cache_trees_are_not_walked(tmp_path: Path) -> None:
    """Conda's package cache and Triton's/torch.compile's kernel caches hold thousands of files
    on a GPU box and no server log: pruned, so the sweep does not wait on walking them. Control:
    a log beside them is found."""
    t = 1_700_000_000
    _touch(tmp_path / "miniconda3" / "pkgs" / "nccl-2.21" / "info" / "build.log", t)
    _touch(tmp_path / ".triton" / "cache" / "ab" / "kernel.log", t)
    _touch(tmp_path / "miniconda3" / "envs" / "serve" / "server.log", t + 1)
    res = run(LocalHost(), Args(roots=[str(tmp_path)], max_depth=6))
    assert [Path(f.path).name for f in res.logs] == ["server.log"]
