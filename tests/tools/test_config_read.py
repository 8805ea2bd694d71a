"""config_read on the seed cards' configs and on realistic .env files and launch scripts."""

from __future__ import annotations

from pathlib import Path

import pytest

from cards.model import load_card
from cards.replay import ReplayHost
from tools.config_read import SPEC, Args, parse_config, run
from tools.local_host import LocalHost

ROOT = Path(__file__).resolve().parents[2]
SITE = "/usr/lib/python3.12/sitecustomize.py"


def _card(card_id: str) -> Path:
    for base in (ROOT / "evals" / "incidents",):
        if (base / f"{card_id}.yaml").exists():
            return base / f"{card_id}.yaml"
    pytest.skip(f"card {card_id} not found")


def test_seed_fusion_sitecustomize() -> None:
    res = SPEC.call(ReplayHost(load_card(_card("seed-sglang-fusion-sm120-jit"))), {"path": SITE})
    assert res.ok and res.format == "python"
    assert res.settings["NCCL_MAX_NCHANNELS"] == "2"
    assert res.settings["NCCL_BUFFSIZE"] == "131072"
    assert len(res.settings) == 7 and res.notable == list(res.settings)
    src = next(s for s in res.sources if s.key == "NCCL_MIN_NCHANNELS")
    assert (
        src.line == 'os.environ.setdefault("NCCL_MIN_NCHANNELS", "1")' and src.how == "setdefault"
    )
    assert src.line in res.lines()


def test_seed_fewchan_sitecustomize() -> None:
    host = ReplayHost(load_card(_card("seed-sglang-fewchan-kv-oom")))
    paths = [p for p in host.file_paths() if p.endswith("sitecustomize.py")]
    assert paths
    res = SPEC.call(host, {"path": paths[0]})
    assert res.ok and any(k.startswith("NCCL_") for k in res.settings)


def test_python_forms_and_setdefault_semantics() -> None:
    text = (
        "import os\n"
        "# os.environ['COMMENTED'] = '1'\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\n"
        'os.environ.setdefault("NCCL_DEBUG", "INFO")\n'
        'os.environ.setdefault("NCCL_DEBUG", "WARN")  # first setdefault wins\n'
        'os.putenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")\n'
        'os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"\n'
    )
    fmt, sources, err = parse_config("/etc/sitecustomize.py", text)
    assert fmt == "python" and err is None
    keys = [s.key for s in sources]
    assert "COMMENTED" not in keys
    from tools.config_read import effective

    eff = effective(sources)
    assert eff["NCCL_DEBUG"] == "INFO"
    assert eff["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert eff["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert eff["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_dotenv_and_exports(tmp_path: Path) -> None:
    env = tmp_path / "serve.env"
    env.write_text(
        "# launch env\nHF_HOME=/data/hf\nNCCL_IB_DISABLE=1\nVLLM_PORT='9000'\n"
        'export CUDA_HOME="/usr/local/cuda-12.4"\nexport A=1 B=2\n'
    )
    res = run(LocalHost(), Args(path=str(env)))
    assert res.settings == {
        "HF_HOME": "/data/hf",
        "NCCL_IB_DISABLE": "1",
        "VLLM_PORT": "9000",
        "CUDA_HOME": "/usr/local/cuda-12.4",
        "A": "1",
        "B": "2",
    }
    assert {"NCCL_IB_DISABLE", "VLLM_PORT", "CUDA_HOME", "HF_HOME"} <= set(res.notable)


def test_launch_scripts_with_engine_flags(tmp_path: Path) -> None:
    script = tmp_path / "launch.sh"
    script.write_text(
        "#!/bin/bash\nset -e\n"
        "NCCL_P2P_LEVEL=SYS SGLANG_ENABLE_JIT=0 python -m sglang.launch_server \\\n"
        "  --model-path /data/models/Kimi --tp 8 \\\n"
        "  --mem-fraction-static 0.55 --enable-flashinfer-allreduce-fusion \\\n"
        "  --port=30000 > /data/logs/server.log 2>&1\n"
        "vllm serve meta-llama/Llama-3.1-8B --gpu-memory-utilization 0.9 --max-model-len 8192\n"
        "trtllm-serve /engines/llama --backend pytorch --max_batch_size 64\n"
        "docker run --gpus all --shm-size 16g -e NCCL_DEBUG=INFO --env VLLM_LOGGING_LEVEL=DEBUG"
        " vllm/vllm-openai:v0.8.5 --model m\n"
        "pip install --upgrade foo\n"
    )
    res = run(LocalHost(), Args(path=str(script)))
    s = res.settings
    assert s["NCCL_P2P_LEVEL"] == "SYS" and s["SGLANG_ENABLE_JIT"] == "0"
    assert s["--tp"] == "8" and s["--mem-fraction-static"] == "0.55"
    assert s["--enable-flashinfer-allreduce-fusion"] == "true"
    assert s["--port"] == "30000"
    assert s["--gpu-memory-utilization"] == "0.9" and s["--max-model-len"] == "8192"
    assert s["model"] == "meta-llama/Llama-3.1-8B"
    assert s["--max_batch_size"] == "64" and s["--backend"] == "pytorch"
    assert s["NCCL_DEBUG"] == "INFO" and s["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert s["--shm-size"] == "16g"
    assert "--upgrade" not in s  # pip is not a launch
    tp = next(x for x in res.sources if x.key == "--tp")
    assert tp.line == "  --model-path /data/models/Kimi --tp 8 \\" and tp.line_no == 4


def test_yaml_and_json_flattened(tmp_path: Path) -> None:
    y = tmp_path / "deploy.yaml"
    y.write_text(
        "spec:\n  containers:\n  - name: vllm\n    args: ['--model', 'm', '--max-model-len', '8192']\n"
        "    env:\n    - name: VLLM_TRACE_FUNCTION\n      value: '1'\n"
    )
    res = run(LocalHost(), Args(path=str(y)))
    assert res.format == "yaml"
    assert res.settings["spec.containers.0.name"] == "vllm"
    assert res.settings["VLLM_TRACE_FUNCTION"] == "1"
    assert res.settings["--max-model-len"] == "8192"
    j = tmp_path / "cfg.json"
    j.write_text('{"engine": {"tp": 2, "fp8": true}}')
    res = run(LocalHost(), Args(path=str(j)))
    assert res.settings == {"engine.tp": "2", "engine.fp8": "true"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\nexport NCCL_ALGO=Tree\n")
    res = run(LocalHost(), Args(path=str(bad)))
    assert res.ok and res.parse_error and res.settings.get("NCCL_ALGO") == "Tree"


def test_never_executes_anything(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    f = tmp_path / "evil.sh"
    f.write_text(
        f"export X=$(touch {canary})\n`touch {canary}`\npython -c 'import os; os.system(\"touch {canary}\")'\n"
    )
    py = tmp_path / "sitecustomize.py"
    py.write_text(
        f"import os\nos.system('touch {canary}')\nos.environ['A'] = __import__('os').getcwd()\n"
    )
    y = tmp_path / "x.yaml"
    y.write_text("!!python/object/apply:os.system ['touch " + str(canary) + "']\n")
    for p in (f, py, y):
        run(LocalHost(), Args(path=str(p)))
    assert not canary.exists()


def test_missing_file() -> None:
    res = run(LocalHost(), Args(path="/no/such/sitecustomize.py"))
    assert not res.ok and "/no/such/sitecustomize.py" in (res.error or "") and res.fix
