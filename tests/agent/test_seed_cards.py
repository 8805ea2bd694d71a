"""The two seed nights end right: the issue's acceptance tests for the agent."""

from __future__ import annotations

from agent.runner import investigate
from agent.settings import Settings
from cards.model import load_card
from cards.replay import ReplayHost
from tests.agent.conftest import card_path


def _run(card_id: str, settings: Settings):  # type: ignore[no-untyped-def]
    card = load_card(card_path(card_id))
    return card, investigate(ReplayHost(card), card.symptom, settings=settings)


def test_fewer_channels_oom_is_kv_cache_and_nvidia_smi_refutes_a_zombie(settings: Settings) -> None:
    card, r = _run("seed-sglang-fewchan-kv-oom", settings)
    assert r.status == "concluded"
    assert r.root_cause == "kv_cache_no_room"
    assert any(
        "Not enough memory. Please try to increase --mem-fraction-static" in e.line
        for e in r.evidence
    )
    assert "stale_gpu_process" in r.ruled_out
    stale = next(h for h in r.hypotheses if h.label == "stale_gpu_process")
    assert stale.status == "refuted"
    # refuted by nvidia-smi: the line cited against it is a GPU line showing 0 MiB used
    gpu_obs = {e.observation for e in stale.against}
    assert any("0 MiB" in e.line for e in stale.against), stale.against
    assert gpu_obs, "the refutation names the observation it comes from"
    assert r.root_cause not in card.expected.wrong  # type: ignore[union-attr]


def test_fusion_jit_error_is_found_past_progress_bars_and_is_not_still_starting(
    settings: Settings,
) -> None:
    card, r = _run("seed-sglang-fusion-sm120-jit", settings)
    assert r.status == "concluded"
    assert r.root_cause == "unsupported_gpu_arch"
    assert r.root_cause != "still_starting"
    assert any(any(exp in e.line for exp in card.expected.evidence) for e in r.evidence)  # type: ignore[union-attr]
    still = next((h for h in r.hypotheses if h.label == "still_starting"), None)
    assert still is None or still.status == "refuted"


def test_every_cited_line_occurs_verbatim_in_its_observation(settings: Settings) -> None:
    from store.memory.sqlite import Memory

    _, r = _run("seed-sglang-fewchan-kv-oom", settings)
    obs = {o["id"]: o for o in Memory(settings.memory_path).observations(r.session_id)}
    for e in r.evidence:
        assert any(e.line in ln for ln in obs[e.observation]["lines"])
