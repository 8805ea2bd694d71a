"""Follow-up answers in prose from the board: the real Runner over a replayed card, the rulebook
answering deterministically and the LLM brain phrasing the same facts over real HTTP (scripted)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agent.followup import Intent, intent_of
from agent.runner import Runner
from agent.settings import Settings
from store.records import Event
from tests.agent.conftest import card_path
from tests.scripted_llm import serve, text
from tools.cards import load_card
from tools.replay_host import ReplayHost

SEED = "seed-sglang-fewchan-kv-oom"
SITECUSTOMIZE = "/usr/lib/python3.12/sitecustomize.py"
KV_LINE = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static"
GPU_FREE = "0, NVIDIA RTX PRO 6000 Blackwell Server Edition, 0 MiB, 97253 MiB, 97887 MiB, 0 %"


@pytest.fixture
def paused(settings: Settings) -> Iterator[tuple[Runner, ReplayHost, str]]:
    """The seed card run to its pause: concluded kv_cache_no_room, asking to restore the config."""
    runner = Runner(settings)
    card = load_card(card_path(SEED))
    host = ReplayHost(card, name=f"replay:{SEED}")
    report = runner.start(host, card.symptom, brain="rulebook")
    assert report.status == "awaiting_approval" and report.root_cause == "kv_cache_no_room"
    yield runner, host, report.session_id
    runner.close()


def _ask(runner: Runner, host: ReplayHost, sid: str, q: str) -> tuple[list[Event], Any]:
    seen: list[Event] = []
    report = runner.message(host, sid, q, on_event=seen.append)
    return seen, report


@pytest.mark.parametrize(
    ("question", "intent"),
    [
        ("check dmesg too", Intent.check),
        ("Can you look at the GPUs again?", Intent.check),
        ("please read the config", Intent.check),
        ("why did you want to restore sitecustomize.py?", Intent.approval),
        ("what does the change do?", Intent.approval),
        ("what would the next check show?", Intent.next_check),
        ("why not a stale GPU process?", Intent.hypothesis),
        ("is it a zombie?", Intent.hypothesis),
        ("how sure are you?", Intent.why),
        ("thanks", Intent.summary),
    ],
)
def test_intent_of_a_follow_up(
    paused: tuple[Runner, ReplayHost, str], question: str, intent: Intent
) -> None:
    runner, _, sid = paused
    assert intent_of(question, runner.known(sid)) is intent


def test_why_restore_is_answered_in_prose_without_running_tools(
    paused: tuple[Runner, ReplayHost, str],
) -> None:
    runner, host, sid = paused
    before = runner.known(sid)
    pending = runner.pending(sid)
    seen, report = _ask(runner, host, sid, "why did you want to restore sitecustomize.py?")
    # one question, one answer: no observation, no new conclusion, no second approval request
    assert [(e.type, e.data["role"]) for e in seen] == [("message", "user"), ("message", "agent")]
    reply = seen[-1].data
    assert reply["kind"] == "answer" and reply["intent"] == "approval"
    t = reply["text"]
    assert f"restore {SITECUSTOMIZE} from {SITECUSTOMIZE}.known-good" in t
    # the diff of what it changes, read from the two config reads
    assert 'NCCL_MIN_NCHANNELS", "1"' in t and 'NCCL_MAX_NCHANNELS", "16"' in t
    # the reason linked to the evidence: the conclusion's own cited line
    assert KV_LINE in t and reply["cites"][0]["line"].startswith("RuntimeError: Not enough memory")
    assert "waiting for your approval" in t
    assert report.status == "awaiting_approval" and report.pending_approval is not None
    assert pending is not None and report.pending_approval.id == pending.id
    assert runner.known(sid).lines == before.lines  # nothing was read
    assert runner.memory.get_session(sid).status == "awaiting_approval"  # type: ignore[union-attr]


def test_why_a_hypothesis_fell_and_why_the_cause_stands(
    paused: tuple[Runner, ReplayHost, str],
) -> None:
    runner, host, sid = paused
    seen, _ = _ask(runner, host, sid, "why not a stale GPU process?")
    t = seen[-1].data["text"]
    assert t.startswith("stale_gpu_process") and "ruled out" in t
    assert "nvidia-smi shows the GPUs free" in t and GPU_FREE in t
    seen, _ = _ask(runner, host, sid, "how sure are you?")
    t = seen[-1].data["text"]
    assert "kv_cache_no_room" in t and "root cause at 93% confidence" in t
    assert "sglang-kv-pool-no-room" in t and KV_LINE in t
    assert "stale_gpu_process" in t  # its rivals fell


def test_what_the_next_check_would_show(paused: tuple[Runner, ReplayHost, str]) -> None:
    runner, host, sid = paused
    seen, _ = _ask(runner, host, sid, "what about the dependency error, what would settle it?")
    t = seen[-1].data["text"]
    assert "dependency_error" in t and "log_search" in t
    assert "if not, it falls" in t and "DeepGEMM is not built for sm_120" in t


def test_a_request_for_a_read_still_runs_the_check(
    paused: tuple[Runner, ReplayHost, str],
) -> None:
    runner, host, sid = paused
    seen, _ = _ask(runner, host, sid, "check dmesg too")
    tools = [e.data["tool"] for e in seen if e.type == "observation"]
    assert tools == ["dmesg"]


def _llm(settings: Settings, url: str) -> Settings:
    return settings.model_copy(
        update={"llm_base_url": url, "llm_model": "scripted", "llm_api_key": "t", "brain": "llm"}
    )


def test_llm_brain_phrases_the_same_facts_and_never_invents_a_line(
    settings: Settings, paused: tuple[Runner, ReplayHost, str]
) -> None:
    rulebook, host, sid = paused
    rulebook.memory.db["sessions"].update(sid, {"brain": "llm"})
    replies = iter(
        [
            text(
                "I asked to put back the known-good sitecustomize.py because it lowered the NCCL "
                f'channels, but the launch died on "{KV_LINE}", which that file does not explain.'
            ),
            text('It failed because "CUDA error: an illegal memory access was encountered".'),
        ]
    )
    with serve(lambda body: next(replies)) as (url, requests):
        runner = Runner(_llm(settings, url), memory=rulebook.memory)
        try:
            seen, _ = _ask(runner, host, sid, "why did you want to restore sitecustomize.py?")
            said = seen[-1].data["text"]
            assert said.startswith("I asked to put back the known-good sitecustomize.py")
            prompt = requests[0]["messages"][0]["content"]
            assert "why did you want to restore" in prompt and KV_LINE in prompt
            assert '+os.environ.setdefault("NCCL_MAX_NCHANNELS", "16")' in prompt
            assert "tools" not in requests[0]  # a prose turn offers no tool
            # a quote that no observation holds: the rulebook's own words are said instead
            seen, _ = _ask(runner, host, sid, "why?")
            said = seen[-1].data["text"]
            assert "illegal memory access" not in said
            assert said.startswith("kv_cache_no_room") and KV_LINE in said
        finally:
            runner.close()
