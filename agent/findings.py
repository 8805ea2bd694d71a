"""From observations to findings: signature hits on log text plus the host-fact rules.

Findings are signed support for a label, each tied to one verbatim line of one observation.
Both brains read the same findings; neither may invent evidence outside them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from functools import lru_cache

from agent.containers import NOT_FOR_WANT_OF_A_GPU, no_gpu_line, own_container_hits
from agent.facts import Facts, derive
from agent.hits import signature_hits
from agent.rules import proof
from agent.rules.causes import cause_rules, unknown_model_type
from agent.rules.common import (
    EXCEPTION_LINE,
    OOM_LABELS,
    OOM_NAMES_A_PID,
    OTHER_PROC_MEM,
    PHASE_PREFIX,
    STRONG_CAP,
    WEAK_CAP,
    WEIGHT,
)
from agent.rules.hang import earlier_instance_hits, hang_rules
from agent.rules.host import host_rules
from agent.rules.liveness import liveness_rules
from agent.rules.memory import (
    oom_at_device_init,
    oom_phase,
    search_rules,
    stale_gpu_possible,
    stale_rules,
)
from agent.rules.passed import keep_supported, passed_rules
from agent.rules.restarts import restart_rules
from agent.rules.structure import structure_rules
from agent.signatures import Match
from agent.state import Finding, Observation
from agent.thresholds import THRESHOLDS
from tools import engines

__all__ = ["compute", "signature_hits"]


def _finding(n: int, label: str, kind: str, w: float, obs: str, line: str, note: str) -> Finding:
    return Finding(
        id=f"f{n}", label=label, kind=kind, strength=w, observation=obs, line=line, note=note
    )


#: Engines every launch runs on: their signatures apply to any engine's launch (engines.yaml).
UNDERLYING = engines.underlying()
#: The weight factor for a signature written for another engine than the launch's.
OTHER_ENGINE = 0.5


def launch_engine(facts: Facts, observations: list[Observation]) -> str | None:
    """The engine of the launch under investigation, as its process shows (ps names it
    reliably; a log's markers can be another engine's library printing inside it)."""
    engine = engines.signature_engine(getattr(facts, "server_engine", None))
    if engine is None:
        return None
    # an engine no signature names by itself is served by the signatures written for "other",
    # unless it runs a named one inside itself (Ollama's llama.cpp runner)
    named = _named_engines()
    return engine if engine in named or engines.embedded(engine) & named else "other"


def _for_engine(m: Match, engine: str | None) -> bool:
    """Does a signature apply to this launch? Unknown engine or an underlying one: yes."""

    if engine is None:
        return True
    sig = _sig_engines().get(m.signature)
    own = {engine} | engines.embedded(engine)
    if engine not in _named_engines():
        own.add("other")
    return sig is None or bool(set(sig) & (UNDERLYING | own))


def _named_engines() -> set[str]:
    return {e for es in _sig_engines().values() for e in es}


def _sig_engines() -> dict[str, list[str]]:
    global _ENGINES_CACHE
    if _ENGINES_CACHE is None:
        from agent.signatures import load_signatures

        _ENGINES_CACHE = {s.id: s.engines for s in load_signatures()}
    return _ENGINES_CACHE


_ENGINES_CACHE: dict[str, list[str]] | None = None


@lru_cache(maxsize=1)
def _latent_ids() -> frozenset[str]:
    from agent.signatures import load_signatures

    return frozenset(s.id for s in load_signatures() if s.latent)


def _fails_later(o: Observation, m: Match, hits: list[tuple[Observation, Match]]) -> str | None:
    """The first fatal line after m in the same read that no labelled signature explains."""
    from agent.evidence import text_lines

    labelled = {
        mm.line_no for oo, mm in hits if oo["id"] == o["id"] and mm.label and mm.strength == "fatal"
    }
    lines = text_lines(o)
    return next(
        (lines[i] for i, _ in proof.fatal_lines(lines) if i > m.line_no and i not in labelled),
        None,
    )


def _ended_tracebacks(o: Observation, memo: dict[str, set[str]]) -> set[str]:
    """The lines of a read that end a Python traceback as its exception, read in order: a class
    only a module path names (`triton.runtime.errors.OutOfResources: ...`) is an exception there,
    where the line alone says nothing of its shape."""
    from agent.evidence import text_lines

    if o["id"] not in memo:
        lines = text_lines(o)
        memo[o["id"]] = {lines[i] for i, kind in proof.fatal_lines(lines) if kind == "exception"}
    return memo[o["id"]]


def _noise(o: Observation, m: Match, hits: list[tuple[Observation, Match]]) -> bool:
    """A live server printed this error line and then more progress (torch.compile's autotune
    rejecting a kernel config, a retried download): not a crash. A traceback's final line is
    never noise: a component died of it even if the front-end lives on."""
    from agent.evidence import text_lines

    later = any(
        oo["id"] == o["id"]
        and mm.strength in ("progress", "ready")
        and mm.line_no > m.line_no
        and not proof.frontend_only(mm.line)  # a /health 200 is the front-end, not the engine
        for oo, mm in hits
    )
    if not later or proof.component_failed(m.line):
        return False
    lines = text_lines(o)
    if any(proof.component_failed(ln) for ln in lines[m.line_no + 1 : m.line_no + 20]):
        return False  # a component (a model's runner) reported dying of it just after
    if m.signature in _latent_ids() and _fails_later(o, m, hits) is not None:
        return False  # worked past it for a while, then failed: of it
    return proof.kind_in_context(lines, m.line_no) != "traceback"


#: The last few results of compute(), by the identity of the observations they were computed
#: from. analyze, decide and conclude each call compute() on the same observations within one
#: round (4-5 times per investigation), and each call re-derived every fact and re-ran every
#: rule: about 8 ms a time, a third of an eval's CPU per card. Observations never change once
#: taken (agent/signatures.py memoises scans on the same promise); the entry keeps them alive,
#: so an id cannot be reused for another observation while it is cached.
_MEMO: OrderedDict[tuple[int, ...], tuple[list[Observation], list[Finding], Facts]] = OrderedDict()
_MEMO_SIZE = 8
_MEMO_LOCK = threading.Lock()


def compute(observations: list[Observation]) -> tuple[list[Finding], Facts]:
    """The findings and facts of these observations. Callers read them, never change them: a
    repeated call with the same observations returns the same objects."""
    key = tuple(id(o) for o in observations)
    with _MEMO_LOCK:
        hit = _MEMO.get(key)
        if hit is not None and all(a is b for a, b in zip(hit[0], observations, strict=True)):
            _MEMO.move_to_end(key)
            return list(hit[1]), hit[2]
    findings, facts = _compute(observations)
    with _MEMO_LOCK:
        _MEMO[key] = (list(observations), findings, facts)
        while len(_MEMO) > _MEMO_SIZE:
            _MEMO.popitem(last=False)
    return list(findings), facts


def _compute(observations: list[Observation]) -> tuple[list[Finding], Facts]:
    facts = derive(observations)
    hits = own_container_hits(facts, signature_hits(observations))
    hits = earlier_instance_hits(facts, observations, hits)
    findings: list[Finding] = []
    seen: set[tuple[str | None, str]] = set()

    def add(label: str, kind: str, w: float, obs: str | None, line: str, note: str) -> None:
        if obs is None or not line or (label, line) in seen:
            return
        seen.add((label, line))
        findings.append(_finding(len(findings) + 1, label, kind, w, obs, line, note))

    engine = launch_engine(facts, observations)
    fatal_lines = [(o, m) for o, m in hits if m.strength == "fatal"]
    first_fatal = fatal_lines[0][1].line if fatal_lines else None
    strong_sum: dict[str, float] = {}
    weak_sum: dict[str, float] = {}
    ended: dict[str, set[str]] = {}
    stale_possible = stale_gpu_possible(facts, hits)
    for o, m in hits:
        if m.label is None or m.signature.startswith(PHASE_PREFIX):
            continue  # phase lines only say when an OOM happened; see oom_phase
        w = WEIGHT.get(m.strength, 0.0)
        label = m.label
        if m.strength == "fatal" and m.line == first_fatal:
            w += 0.5  # the first fatal line is usually the cause; later ones are fallout
        if m.strength == "strong" and (
            EXCEPTION_LINE.search(m.line)
            or proof.fatal_kind(m.line) in ("exception", "error_level")
            or m.line in _ended_tracebacks(o, ended)
        ):
            w = WEIGHT[
                "fatal"
            ]  # the line that ended the process (by its shape) carries this message
        init = (
            oom_at_device_init(o, m, hits)
            if m.strength == "fatal" and label in OOM_LABELS
            else None
        )
        if init is not None:
            # the OOM came before the launch loaded or ran anything: neither of its OOM labels
            # is the cause; the line stays a clue (who filled the GPU: another process, or the
            # CUDA/torch build's own context)
            w = WEIGHT["weak"]
            for other in sorted(OOM_LABELS):
                add(
                    other,
                    "phase",
                    -2.5,
                    o["id"],
                    init,
                    "the OOM came while the CUDA device was being set up, before the launch "
                    'loaded or ran anything of its own; `python -c "import torch; '
                    "torch.zeros(1, device='cuda'); print(torch.cuda.mem_get_info())\"` in its "
                    "environment says whether the CUDA/torch build itself takes the memory",
                )
        elif m.strength == "fatal" and label in OOM_LABELS:
            label, phase = oom_phase(o, m, hits)
            if phase is not None:
                if phase.line != m.line:
                    # (a phase named on the OOM line itself is the OOM's own finding below: a
                    # second one on the same line would take its place at a lower weight)
                    add(label, "phase", 1.0, o["id"], phase.line, f"the OOM came {phase.signature}")
                for other in sorted(OOM_LABELS - {label}):
                    add(
                        other,
                        "phase",
                        -2.5,
                        o["id"],
                        phase.line,
                        {
                            "cuda_oom_runtime": "loading had finished before the OOM",
                            "gpu_oom_weights": "the OOM came while weights were still loading",
                        }.get(label, "the OOM came while the KV-cache pool was being sized"),
                    )
        if facts.server_alive and m.strength in ("fatal", "strong") and _noise(o, m, hits):
            continue  # an error line a live server logged and then worked on past: noise
        effect = _fails_later(o, m, hits) if m.signature in _latent_ids() else None
        if effect:
            # a latent condition, then an error no signature explains: the condition is the
            # best-supported cause of that error, which is cited beside it
            w = max(w, WEIGHT["fatal"])
            add(label, "effect", 0.25, o["id"], effect, "the failure that followed it")
        if (
            m.strength != "fatal"
            and {x.label for _, x in fatal_lines} & NOT_FOR_WANT_OF_A_GPU
            and no_gpu_line(m.line)
        ):
            w = min(w, WEIGHT["weak"])  # no GPU seen does not explain a failure of its own kind
        if not _for_engine(m, engine):
            w *= OTHER_ENGINE  # a line made for another engine's code path is weaker evidence
        if proof.is_wrapper(m.line):
            w = min(w, WEIGHT["weak"])  # "see root cause above": the cause is another line
        if label == "stale_gpu_process" and not stale_possible:
            w = min(w, WEIGHT["weak"])  # torch names "Process N" even when N is the server itself
        if m.signature in OOM_NAMES_A_PID and _named_holders_live_tenants(facts, m.line):
            # every holder torch names that still runs is another user's live job: it is why
            # the launch had less memory, not a stale process (the memory failure is the label)
            w = min(w, WEIGHT["weak"])
        if m.signature == "transformers-too-old-for-model" and unknown_model_type([(o, m)]):
            # no release knows the model type: not a version to upgrade (causes.py says what)
            w = min(w, WEIGHT["weak"])
        if m.strength == "weak":
            if weak_sum.get(label, 0.0) >= WEAK_CAP:
                continue
            weak_sum[label] = weak_sum.get(label, 0.0) + w
        if m.strength == "strong":
            if strong_sum.get(label, 0.0) >= STRONG_CAP:
                continue
            strong_sum[label] = strong_sum.get(label, 0.0) + w
            if label == "killed_externally" and facts.server_alive is False:
                # a sign of a stop from outside, and the process is gone: the stop is shown,
                # not hinted (the liveness rule's "gone with no error of its own" would read
                # this same line, and one line carries one finding per label)
                w = max(w, WEIGHT["fatal"])
        add(label, m.strength, w, o["id"], m.line, f"signature {m.signature}")

    search_rules(facts, observations, hits, add)
    stale_rules(facts, observations, hits, add)
    liveness_rules(facts, observations, hits, add)
    host_rules(facts, hits, add, observations)
    structure_rules(facts, observations, hits, add)
    hang_rules(facts, observations, hits, add)
    cause_rules(facts, observations, hits, add)
    passed_rules(facts, observations, add)
    restart_rules(facts, observations, add)
    return keep_supported(findings, THRESHOLDS.board.supported_at), facts


def _named_holders_live_tenants(facts: Facts, line: str) -> bool:
    """Every process torch's OOM names as a holder that is alive now is a co-tenant (another
    user's running job, another launch serving), none a second copy of the launch or a
    leftover; a named pid that is gone holds nothing now. False when none named is alive."""
    named = [int(m.group(1)) for m in OTHER_PROC_MEM.finditer(line)]
    alive = [p for p in named if p in facts._ps_recs and not facts._ps_recs[p].get("zombie")]
    return bool(alive) and all(
        p in facts.co_tenant_pids and p not in facts.leftover_pids for p in alive
    )
