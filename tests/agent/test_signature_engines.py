"""The signatures' `engines` field is read: a line written for another engine weighs less."""

from __future__ import annotations

from agent.facts import Facts
from agent.findings import _for_engine, launch_engine
from agent.signatures import Match, load_signatures


def _match(engines: set[str]) -> Match:
    sig = next(s for s in load_signatures() if set(s.engines) == engines)
    return Match(signature=sig.id, label=sig.label, strength=sig.strength, line="x", line_no=0)


def test_the_launch_engine_comes_from_its_process_in_taxonomy_terms() -> None:
    assert launch_engine(Facts(server_engine="sglang"), []) == "sglang"
    # an engine no signature names is served by the "other" signatures (and by those of an
    # engine it runs inside itself: Ollama's llama.cpp runner); a catch-all by none
    assert launch_engine(Facts(server_engine="ollama"), []) == "ollama"
    assert launch_engine(Facts(server_engine="lmdeploy"), []) == "other"
    assert _for_engine(_match({"llama.cpp"}), "ollama")
    assert _for_engine(_match({"other"}), "ollama")
    assert not _for_engine(_match({"vllm"}), "ollama")
    assert launch_engine(Facts(server_engine="custom"), []) is None
    assert launch_engine(Facts(server_engine="emulator"), []) is None
    assert launch_engine(Facts(server_engine=None), []) is None


def test_a_vllm_only_signature_does_not_apply_in_full_to_an_sglang_launch() -> None:
    vllm_only = _match({"vllm"})
    assert _for_engine(vllm_only, "vllm")
    assert not _for_engine(vllm_only, "sglang")
    assert _for_engine(vllm_only, None)  # unknown engine: no discount


def test_torch_and_nccl_signatures_apply_to_every_engine() -> None:
    assert _for_engine(_match({"nccl"}), "sglang")
    assert _for_engine(_match({"torch"}), "trtllm")
