"""The spread of a real GPU decode night, measured: what `bench/aa_night.py` fits its noise to.

No serving engine can be installed on the lent H200 (no network, no vLLM/SGLang in its image),
so this measures the nearest real thing it holds: a Llama-shaped model (random bf16 weights,
~1.1B parameters) decoding a batch with Hugging Face `generate`, as separate processes
("launches", as a night relaunches its server per experiment), each timed over several
benchmark runs. It prints one JSON object: tokens/s per run per launch, with timestamps.

    python3 bench/h200_spread.py --launches 10 --runs 5 > spread.json   # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time


def one_launch(runs: int, batch: int, new_tokens: int) -> list[dict[str, float]]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        hidden_size=2048,
        intermediate_size=5632,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=8,
        vocab_size=32000,
    )
    torch.manual_seed(0)
    with torch.device("cuda"):  # initialized on the GPU: seconds, not a minute of CPU
        model = LlamaForCausalLM(cfg).to(dtype=torch.bfloat16).eval()
    prompt = torch.randint(0, 32000, (batch, 128), device="cuda")
    gen = dict(
        max_new_tokens=new_tokens,
        min_new_tokens=new_tokens,
        do_sample=False,
        pad_token_id=0,
        eos_token_id=None,
    )
    with torch.no_grad():
        model.generate(prompt, **gen)  # warm-up, as a server's first requests
        out = []
        for _ in range(runs):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            model.generate(prompt, **gen)
            torch.cuda.synchronize()
            took = time.perf_counter() - t0
            out.append({"t": time.time(), "tokens_per_s": batch * new_tokens / took})
    return out


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--launches", type=int, default=10)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument("--child", action="store_true")
    a = p.parse_args()
    if a.child:
        print(json.dumps(one_launch(a.runs, a.batch, a.new_tokens)))
        return 0
    launches = []
    for i in range(a.launches):
        cmd = [sys.executable, __file__, "--child", "--runs", str(a.runs)]
        cmd += ["--batch", str(a.batch), "--new-tokens", str(a.new_tokens)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=True)
        launches.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"launch {i}: {[round(r['tokens_per_s']) for r in launches[-1]]}", file=sys.stderr)
    import torch

    print(
        json.dumps(
            {
                "gpu": torch.cuda.get_device_name(0),
                "torch": torch.__version__,
                "batch": a.batch,
                "new_tokens": a.new_tokens,
                "launches": launches,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
