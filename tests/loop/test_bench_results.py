"""The real benchmark clients' result files, parsed whole (fixtures in the clients' own shapes)."""

from __future__ import annotations

from pathlib import Path

from tools.bench_results import detect, last_json, parse_results, unit

FIX = Path(__file__).with_name("fixtures")


def test_vllm_bench_serve_save_result() -> None:
    text = (FIX / "vllm_bench_serve.json").read_text()
    obj = last_json(text)
    assert obj is not None and detect(obj) == "vllm"
    m = parse_results(text)
    assert m["output_throughput"] == 155.35 and m["request_goodput"] == 0.8091
    assert m["p99_ttft_ms"] == 60.96 and m["p90_tpot_ms"] == 15.52 and m["p99_itl_ms"] == 15.98
    assert m["mean_e2e_ms"] == 1983.4 and m["p99_e2e_ms"] == 2011.3  # e2el -> e2e
    assert m["p50_ttft_ms"] == m["median_ttft_ms"] == 53.8
    assert m["errors"] == 1.0 and m["failed"] == 1.0  # one failed request in the error list
    assert "ttfts" not in m and "itls" not in m  # per-request lists are not metrics


def test_sglang_bench_serving_jsonl_last_run_wins() -> None:
    text = (FIX / "sglang_bench_serving.jsonl").read_text()
    obj = last_json(text)
    assert obj is not None and detect(obj) == "sglang"
    m = parse_results(text)
    assert m["request_rate"] == 16.0 and m["output_throughput"] == 3644.6
    assert m["p99_ttft_ms"] == 512.9 and m["p95_itl_ms"] == 27.3
    assert m["mean_e2e_ms"] == 4101.9 and m["p99_e2e_ms"] == 5522.1  # e2e_latency -> e2e
    assert m["concurrency"] == 58.4 and "accept_length" not in m


def test_generic_json_nested_and_noise_around_it() -> None:
    text = "warming up...\n" + (FIX / "generic_result.json").read_text().replace("\n", " ")
    m = parse_results(text + "\nbye\n")
    assert m == {"summary.tokens_per_s": 1875.5, "summary.latency.p99_ms": 410.0}
    assert parse_results("no json here") == {}


def test_units() -> None:
    assert unit("p99_ttft_ms") == "ms" and unit("output_throughput") == "tok/s"
    assert unit("request_throughput") == "req/s" and unit("errors") == ""
