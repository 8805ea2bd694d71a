"""`LLMBrain`: the same graph with a smarter policy, over any OpenAI-compatible endpoint.

The model sees the board, the suggested checks and bounded observations (marked as untrusted
data) and answers with exactly one typed tool call. Unknown tools, malformed arguments and
invented evidence are refused and retried; the guardrails in code decide whether a conclusion
stands. Turns can be recorded to a directory and replayed offline (evals in CI).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from collections import Counter
from pathlib import Path
from typing import Any

from openai import APIStatusError, OpenAI, OpenAIError
from pydantic import BaseModel, Field, ValidationError

from agent.board import ranked
from agent.brains.base import BrainContext
from agent.followup import Answer, Known
from agent.rules.proof import fatal_lines
from agent.signatures import scan
from agent.state import Action, State
from agent.thresholds import THRESHOLDS
from cards.taxonomy import LABELS, TAXONOMY
from prompts import render
from tools.registry import TOOLS


class Cited(BaseModel):
    observation: str
    line: str = Field(min_length=1)


class Refutation(BaseModel):
    """A rival ruled out by a line that shows it did not happen (nvidia-smi free for a stale
    process, the kernel log's tally for an OOM kill): quoted verbatim, checked like evidence."""

    label: str
    observation: str = Field(description="id of the observation the line occurs in")
    line: str = Field(min_length=1, description="the refuting line, verbatim")
    why: str = Field("", description="why this line rules the label out")


class Conclude(BaseModel):
    label: str
    evidence: list[Cited] = Field(min_length=1, max_length=5)
    ruled_out: list[str | Refutation] = Field(
        default_factory=list,
        description="rivals ruled out; give {label, observation, line, why} with the verbatim "
        "line that refutes each (a bare label is noted but refutes nothing)",
    )
    next_step: str = ""
    confidence: float = Field(0.7, ge=0, le=1)
    summary: str = ""


class Insufficient(BaseModel):
    why: str = ""


def _lean(schema: Any) -> Any:
    """A JSON schema without pydantic's `title` keys: sent with every decision, they cost a
    third of the tools' share of the budget and tell the model nothing the names do not."""
    if isinstance(schema, dict):
        return {k: _lean(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_lean(v) for v in schema]
    return schema


def _tool_schemas(changing_ok: bool) -> list[dict[str, Any]]:
    out = []
    for spec in TOOLS.values():
        if spec.changing and not changing_ok:
            continue
        out.append(
            {
                "type": "function",
                "function": {
                    "name": spec.name,
                    "description": (
                        spec.description
                        + (" (changing: pauses for approval)" if spec.changing else "")
                    )[:1000],
                    "parameters": _lean(spec.json_schema()),
                },
            }
        )
    return out


CONCLUDE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "conclude",
            "description": "State the root cause with verbatim evidence lines.",
            "parameters": {
                **Conclude.model_json_schema(),
                "properties": {
                    **Conclude.model_json_schema()["properties"],
                    "label": {"type": "string", "enum": list(LABELS)},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "insufficient_evidence",
            "description": "Stop honestly: the evidence cannot decide.",
            "parameters": Insufficient.model_json_schema(),
        },
    },
]


class LLMBrain:
    name = "llm"

    def __init__(self, settings: Any) -> None:
        self.settings = settings
        self.model = settings.llm_model
        self.record_dir: Path | None = getattr(settings, "llm_record_dir", None)
        self.replay_dir: Path | None = getattr(settings, "llm_replay_dir", None)
        self._client: OpenAI | None = None
        if self.replay_dir is None:
            if not settings.llm_base_url:
                raise ValueError(
                    "the llm brain needs PIVOT_LLM_BASE_URL (any OpenAI-compatible endpoint)"
                )
            self._client = OpenAI(
                base_url=settings.llm_base_url,
                api_key=settings.llm_api_key or "none",
                timeout=settings.llm_timeout_s,
                max_retries=1,
            )
        self._tokens = 0
        #: which tool_choice this endpoint takes for a forced call: None until one answered;
        #: "auto" once it refused "required" (llama-cpp-python's server answers 500), so later
        #: turns (and later brains in this process, e.g. the next card) skip the failing mode
        self._endpoint = f"{settings.llm_base_url}|{self.model}"
        self.choice_mode: str | None = _CHOICE_MODE.get(self._endpoint)
        #: how each model turn was answered: live, hash, sequence (replay), missing
        self.turns: Counter[str] = Counter()
        self._seq: str = "session"
        self._session: str = ""

    def tokens_used(self) -> int:
        return self._tokens

    # -- transport with record / replay --------------------------------------------------------------
    def _start_turns(self, state: State) -> None:
        """The sequence key of this run: the card id for a replayed card (stable between a
        recording and its replay), else host and session."""
        self._session = str(state.get("session_id") or "")
        self._seq = sequence_id(str(state.get("host") or ""), self._session)

    def _complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], choice: str
    ) -> dict[str, Any]:
        key = _turn_key(self.model, messages, tools, choice)
        reuse = Path(self.record_dir) / f"{key}.json" if self.record_dir is not None else None
        if self.replay_dir is not None:
            data = self._replay(Path(self.replay_dir), key, self._seq_rel())
        elif reuse is not None and reuse.exists():
            # recording resumes: the very same request was answered in an earlier (interrupted)
            # recording run; the model is not asked twice
            data = json.loads(reuse.read_text())
            seq_rel = self._seq_rel()
            (reuse.parent / seq_rel).parent.mkdir(parents=True, exist_ok=True)
            seq = {"hash": key, "tool_choice": choice, "response": data}
            (reuse.parent / seq_rel).write_text(json.dumps(seq, indent=1))
            _tally("recorded")
        else:
            data = self._call(messages, tools, choice)  # a failed call takes no turn number
            seq_rel = self._seq_rel()
            self.turns["live"] += 1
            if self.record_dir is not None:
                rec = Path(self.record_dir)
                (rec / seq_rel).parent.mkdir(parents=True, exist_ok=True)
                (rec / f"{key}.json").write_text(json.dumps(data, indent=1))
                seq = {"hash": key, "tool_choice": choice, "response": data}
                (rec / seq_rel).write_text(json.dumps(seq, indent=1))
                _tally("recorded")
        data = with_content_call(data, {t["function"]["name"] for t in tools})
        self._tokens += int((data.get("usage") or {}).get("total_tokens") or 0)
        return data

    def _seq_rel(self) -> str:
        """`<card-id>/turn-003.json`: this run's next turn in its sequence."""
        return f"{self._seq}/turn-{_next_turn(self._session or self._seq):03d}.json"

    def _replay(self, d: Path, key: str, seq_rel: str) -> dict[str, Any]:
        """By the request's hash first; when the prompt drifted since the recording, by the turn's
        place in its card's sequence."""
        path = d / f"{key}.json"
        if path.exists():
            self.turns["hash"] += 1
            _tally("hash")
            return dict(json.loads(path.read_text()))
        seq = d / seq_rel
        if seq.exists():
            self.turns["sequence"] += 1
            _tally("sequence")
            return dict(json.loads(seq.read_text())["response"])
        self.turns["missing"] += 1
        _tally("missing")
        raise LookupError(
            f"no recorded model turn {path.name} (nor {seq_rel}) in {d}: re-record with --record"
        )

    def _call(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], choice: str
    ) -> dict[str, Any]:
        """One completion. A forced call tries "required", and on a server that rejects it falls
        back to "auto" (a reply without a tool call is then parsed from its content)."""
        assert self._client is not None
        modes = [choice]
        if choice == "required":
            modes = ["auto"] if self.choice_mode == "auto" else ["required", "auto"]
        for i, mode in enumerate(modes):
            # a prose turn offers no tools at all (an empty `tools` is refused by some servers)
            offer: dict[str, Any] = {"tools": tools, "tool_choice": mode} if tools else {}
            try:
                resp = self._client.chat.completions.create(
                    model=self.model,
                    messages=messages,  # type: ignore[arg-type]
                    temperature=0,
                    **offer,
                )
            except APIStatusError as exc:
                if i + 1 < len(modes) and exc.status_code in _REJECTS_CHOICE:
                    continue  # this server does not take tool_choice="required"
                raise
            if choice == "required":
                self.choice_mode = _CHOICE_MODE[self._endpoint] = mode
            return dict(resp.model_dump(mode="json"))
        raise AssertionError("unreachable")  # pragma: no cover

    # -- policy ----------------------------------------------------------------------------------------
    def decide(self, state: State, ctx: BrainContext) -> Action:
        self._start_turns(state)
        tools = _tool_schemas(changing_ok=True) + CONCLUDE_TOOLS
        system = render(
            "system.j2", taxonomy=TAXONOMY, resource_wait_s=THRESHOLDS.hang.resource_wait_s
        )
        view = {
            "symptom": state.get("symptom", ""),
            "notes": state.get("notes", []),
            "board": ranked(state.get("hypotheses", {})),
            "options": [o.model_dump() for o in ctx.options[:6]],
            "changes": ctx.changes_possible,
            "rejections": state.get("rejections", [])[-5:],
            "budget": {k: round(v, 1) for k, v in ctx.budget_left.items()},
            "decided": state.get("changes", [])[-5:],
            "concluded": (state.get("report") or {}).get("root_cause"),
        }
        # Everything but the observations is fixed; the observations get what is left of one
        # decision's token budget (tools' schemas count: they are sent every turn).
        fixed = len(system) + len(render("decide.j2", **view, observations=[]))
        tokens = self.settings.llm_decision_tokens or DECISION_TOKENS
        if (
            tokens * CHARS_PER_TOKEN - fixed - len(json.dumps(tools)) - RESERVE_CHARS
            < MIN_OBS_CHARS
        ):
            # a small model's window: the schemas go without their arguments' descriptions (the
            # names, types and enums stay), so the observations keep their share of it
            tools = [_terse(t) for t in tools]
        fixed += len(json.dumps(tools))
        budget = max(MIN_OBS_CHARS, tokens * CHARS_PER_TOKEN - fixed - RESERVE_CHARS)
        messages = [
            {"role": "system", "content": system},
            {
                "role": "user",
                "content": render(
                    "decide.j2", **view, observations=compact(state, budget_chars=budget)
                ),
            },
        ]
        for _attempt in range(self.settings.llm_max_retries + 1):
            try:
                data = self._complete(messages, tools, "required")
            except (OpenAIError, LookupError) as exc:
                return Action(
                    kind="insufficient",
                    why=f"model endpoint failed: {type(exc).__name__}: {str(exc)[:200]}",
                )
            action, problem, call = self._parse(data)
            if action is not None:
                return action
            messages.append(
                {"role": "assistant", "content": None, "tool_calls": [call]}
                if call
                else {"role": "assistant", "content": _content(data)}
            )
            if call:
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call.get("id", "x"),
                        "content": f"REFUSED: {problem}",
                    }
                )
            else:
                messages.append(
                    {
                        "role": "user",
                        "content": f"REFUSED: {problem}. Make exactly one valid tool call.",
                    }
                )
        return Action(
            kind="insufficient", why=f"the model gave no valid decision after retries ({problem})"
        )

    def _parse(self, data: dict[str, Any]) -> tuple[Action | None, str, dict[str, Any] | None]:
        msg = ((data.get("choices") or [{}])[0]).get("message") or {}
        calls = msg.get("tool_calls") or []
        if not calls:
            return None, "no tool call", None
        call = calls[0]
        fn = call.get("function") or {}
        name = fn.get("name", "")
        try:
            args = json.loads(fn.get("arguments") or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (ValueError, TypeError) as exc:
            return None, f"malformed arguments for {name}: {exc}", call
        if name == "conclude":
            try:
                c = Conclude.model_validate(args)
            except ValidationError as exc:
                return None, f"bad conclude: {exc.errors()[0]['msg']}", call
            if c.label not in LABELS:
                return None, f"{c.label!r} is not a taxonomy label", call
            return (
                Action(
                    kind="conclude",
                    label=c.label,
                    confidence=c.confidence,
                    evidence=[e.model_dump() for e in c.evidence],
                    ruled_out=[
                        x if isinstance(x, str) else x.label
                        for x in c.ruled_out
                        if (x if isinstance(x, str) else x.label) in LABELS
                    ],
                    refutations=[x.model_dump() for x in c.ruled_out if isinstance(x, Refutation)],
                    next_step=c.next_step,
                    summary=c.summary or c.label,
                ),
                "",
                call,
            )
        if name == "insufficient_evidence":
            return Action(kind="insufficient", why=str(args.get("why", ""))[:500]), "", call
        spec = TOOLS.get(name)
        if spec is None:
            return None, f"no tool named {name!r}; only the offered typed tools exist", call
        try:
            spec.args.model_validate(args)
        except ValidationError as exc:
            return None, f"bad arguments for {name}: {exc.errors()[0]['msg']}", call
        return (
            Action(
                kind="change" if spec.changing else "check",
                tool=name,
                args=args,
                why=str(msg.get("content") or "model's choice")[:300],
            ),
            "",
            call,
        )

    def follow_up(self, state: State, text: str, ctx: BrainContext) -> tuple[str, list[Action]]:
        self._start_turns(state)
        messages = [
            {
                "role": "system",
                "content": render(
                    "system.j2", taxonomy=TAXONOMY, resource_wait_s=THRESHOLDS.hang.resource_wait_s
                ),
            },
            {
                "role": "user",
                "content": render(
                    "follow_up.j2",
                    symptom=state.get("symptom", ""),
                    text=text,
                    board=ranked(state.get("hypotheses", {})),
                ),
            },
        ]
        try:
            data = self._complete(messages, _tool_schemas(changing_ok=False), "auto")
        except (OpenAIError, LookupError) as exc:
            return f"(model unavailable: {type(exc).__name__})", []
        actions: list[Action] = []
        msg = ((data.get("choices") or [{}])[0]).get("message") or {}
        for call in (msg.get("tool_calls") or [])[:3]:
            fn = call.get("function") or {}
            spec = TOOLS.get(fn.get("name", ""))
            try:
                args = json.loads(fn.get("arguments") or "{}")
                if spec is None or spec.changing:
                    continue
                spec.args.model_validate(args)
            except (ValueError, ValidationError):
                continue
            actions.append(
                Action(kind="check", tool=spec.name, args=args, why=f"asked: {text[:80]}")
            )
        return (_content(data) or "Checking.").strip(), actions

    def explain(self, question: str, answer: Answer, known: Known) -> str:
        """The rulebook's answer, said by the model over the same facts. A reply that quotes a
        line nobody observed, or fails, is dropped for the rulebook's own words."""
        diff = next((c.diff for c in known.changes), []) if answer.intent == "approval" else []
        prompt = render(
            "answer.j2",
            question=question,
            symptom=known.symptom,
            facts=answer.text,
            cites=answer.cites,
            diff=diff,
        )
        try:
            data = self._complete([{"role": "user", "content": prompt}], [], "none")
        except (OpenAIError, LookupError):
            return answer.text
        text = " ".join(_content(data).split())
        if not text or _invented_quote(text, known):
            return answer.text
        if answer.cites and not any(c.line.strip()[:60] in text for c in answer.cites):
            c = answer.cites[0]
            text += f' (cited: {c.observation}: "{c.line.strip()}")'
        return text


_QUOTE = re.compile(r'"([^"]{16,})"')


def _invented_quote(text: str, known: Known) -> bool:
    """A double-quoted stretch that looks like a log line but occurs in no observation."""
    for q in _QUOTE.findall(text):
        q = q.rstrip("…").strip()
        if not known.observed(q):
            return True
    return False


#: The wall-clock budget in the prompt differs between a recorded run and its replay; the turn
#: key leaves it out so `--replay-model` finds the recorded turn (the model still sees it).
_VOLATILE = re.compile(r'"seconds": -?[0-9.]+')


def _turn_key(model: str, messages: list[dict[str, Any]], tools: Any, choice: str) -> str:
    stable = [
        {**m, "content": _VOLATILE.sub('"seconds": 0', m["content"])}
        if isinstance(m.get("content"), str)
        else m
        for m in messages
    ]
    blob = json.dumps([model, stable, tools, choice], sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24]


def _content(data: dict[str, Any]) -> str:
    return str((((data.get("choices") or [{}])[0]).get("message") or {}).get("content") or "")


#: endpoint -> the tool_choice that worked there for a forced call
_CHOICE_MODE: dict[str, str] = {}


# -- turn keys, sequence keys and the replay tally -------------------------------------------------
_TURNS: dict[str, int] = {}
_TURNS_LOCK = threading.Lock()
#: `pivot eval` sets this to a file; every replayed or recorded turn appends one word to it, so
#: the CLI can say how many turns replayed by hash and how many by sequence (workers included)
TALLY_ENV = "PIVOT_LLM_TURN_TALLY"


def sequence_id(host: str, session_id: str) -> str:
    """The replayed host's own (opaque, per-card) name, else `<host>-<session>`; safe as a
    directory name."""
    replayed = host.startswith(("replay:", "replay-"))
    raw = host.removeprefix("replay:") if replayed else f"{host}-{session_id}"
    return re.sub(r"[^A-Za-z0-9._-]+", "_", raw).strip("._") or "session"


def _next_turn(session: str) -> int:
    """Turn numbers run per session across brain instances (a resumed run continues them)."""
    with _TURNS_LOCK:
        _TURNS[session] = _TURNS.get(session, 0) + 1
        return _TURNS[session]


def _tally(word: str) -> None:
    path = os.environ.get(TALLY_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as f:  # one short append: atomic across workers
            f.write(word + "\n")


# -- a tool call written in the content (servers that ignore `tools`) --------------------------------
#: HTTP statuses with which servers refuse tool_choice="required" (llama-cpp-python: 500)
_REJECTS_CHOICE = {400, 404, 422, 500, 501}
_DECODER = json.JSONDecoder()


def with_content_call(data: dict[str, Any], offered: set[str]) -> dict[str, Any]:
    """A reply with no tool call whose content holds one JSON tool call (`{"name": ...,
    "arguments": {...}}`, maybe in a ```json fence or with prose around it) gets that call as its
    tool call; the prose stays as the content. Anything else is returned unchanged."""
    choices = data.get("choices") or []
    if not choices:
        return data
    msg = choices[0].get("message") or {}
    content = msg.get("content")
    if msg.get("tool_calls") or not isinstance(content, str) or "{" not in content:
        return data
    found = parse_content_call(content, offered)
    if found is None:
        return data
    name, args, prose = found
    call = {
        "id": "call_from_content",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    new_msg = {**msg, "content": prose or None, "tool_calls": [call]}
    return {
        **data,
        "choices": [{**choices[0], "message": new_msg}, *choices[1:]],
        "pivot_call_from_content": True,
    }


def parse_content_call(content: str, offered: set[str]) -> tuple[str, dict[str, Any], str] | None:
    """(name, arguments, prose around it) of the first JSON tool call in `content`: an offered
    tool's name is preferred, else the first object with a name (it is refused downstream)."""
    candidates: list[tuple[str, dict[str, Any], int, int]] = []
    pos = content.find("{")
    while pos != -1 and len(candidates) < 20:
        try:
            obj, end = _DECODER.raw_decode(content, pos)
        except ValueError:
            pos = content.find("{", pos + 1)
            continue
        call = _as_call(obj)
        if call is not None:
            candidates.append((*call, pos, end))
        pos = content.find("{", end)
    if not candidates:
        return None
    name, args, a, b = next((c for c in candidates if c[0] in offered), candidates[0])
    prose = content[:a] + content[b:]
    prose = re.sub(r"```(?:json)?\s*```", "", re.sub(r"```(?:json)?\s*\n?\s*```", "", prose))
    return name, args, " ".join(prose.replace("```json", "").replace("```", "").split())


def _as_call(obj: Any) -> tuple[str, dict[str, Any]] | None:
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("tool_calls"), list) and obj["tool_calls"]:
        return _as_call(obj["tool_calls"][0])
    if isinstance(obj.get("function"), dict):
        return _as_call(obj["function"])
    name = obj.get("name") or obj.get("tool")
    if not isinstance(name, str) or not name:
        return None
    args = next((obj[k] for k in ("arguments", "parameters", "args") if k in obj), {})
    if isinstance(args, str):
        try:
            args = json.loads(args or "{}")
        except ValueError:
            return None
    return (name, args) if isinstance(args, dict) else None


# -- bounded observations: a token budget per decision ------------------------------------------------
#: One decision (system prompt, tools' schemas, board, observations) stays within this budget
#: when the settings give none (Settings.llm_decision_tokens).
DECISION_TOKENS = 16_000


def _terse(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool schema without its arguments' descriptions: what a small window can carry."""

    def strip(node: Any) -> Any:
        if isinstance(node, dict):
            # a property may be named "description"; only the annotation strings go
            return {
                k: strip(v)
                for k, v in node.items()
                if not (k in ("description", "title") and isinstance(v, str))
            }
        if isinstance(node, list):
            return [strip(v) for v in node]
        return node

    fn = tool.get("function", {})
    return {**tool, "function": {**fn, "parameters": strip(fn.get("parameters", {}))}}


CHARS_PER_TOKEN = 4  # ~4 characters per token for English and log text
#: kept free for the refused call and the refusal a retry appends
RESERVE_CHARS = 2000
MIN_OBS_CHARS = 4000
MAX_LINE = 240
MAX_FATAL_LINE = 1000
#: lines kept from the end of each Python traceback (the frames nearest the error, its last line)
TRACEBACK_TAIL = 8
#: an elision marker's cost, counted high so the budget holds before the numbers are known
_MARK_COST = 56

#: fatal by shape (kept always): a final exception line, an ERROR/FATAL/CRITICAL level, NCCL and
#: CUDA error strings, kernel OOM kills and Xids, signals. Generous on purpose: keeping a line
#: costs a few tokens, losing the one that proves the crash costs the investigation.
_FATAL = re.compile(
    "|".join(
        [
            r"^\s*(?:\[rank\d+\]:?\s*|\(\w+ pid=\d+\)\s*)?(?:[A-Za-z_]\w*\.)*[A-Z]\w*"
            r"(?:Error|Exception|Exit|Interrupt|Failure)(?::\s|:?\s*$)",
            r"\b(?:ERROR|FATAL|CRITICAL)\b",
            r"^\s*[EF]\d{4} \d\d:\d\d:\d\d",
            r"\[(?:E|F)\]\s",
            r"\blevel=(?:error|fatal|critical)\b",
            r"NCCL WARN",
            r"\bnccl\w*Error\b",
            r"\bNCCL error\b",
            r"\bCUDA error\b",
            r"\bcudaError\w+",
            r"\bCUDA_ERROR_\w+",
            r"\bCU(?:BLAS|DNN)_STATUS_(?!SUCCESS)\w+",
            r"CUDA out of memory",
            r"illegal memory access",
            r"device-side assert",
            r"NVRM: Xid|\bXid\b",
            r"Out of memory: Kill|oom-kill|invoked oom-killer|Memory cgroup out of memory",
            r"\bOOMKilled\b",
            r"^\s*Killed\s*$",
            r"Segmentation fault|core dumped|terminate called after throwing",
            r"\bSIG(?:KILL|SEGV|ABRT|BUS)\b",
        ]
    )
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


def compact(state: State, budget_chars: int) -> list[dict[str, Any]]:
    """Every observation within one shared budget of characters (~4 per token).

    Kept first, in this order: fatal lines and lines the board cites, the last lines of every
    Python traceback, phase markers (the start-up phase a failure happened in); then each
    observation's head and tail, round robin, until the budget is spent. What is left out shows
    as `# … N lines not shown (lines a–b) …` (1-based line numbers of the observation)."""
    obs = list(state.get("observations", []))
    cited: dict[str, set[str]] = {}
    for h in (state.get("hypotheses") or {}).values():
        for e in [*h.get("evidence", []), *h.get("against", [])]:
            cited.setdefault(str(e.get("observation")), set()).add(str(e.get("line", "")).strip())
    views = [_View(o, cited.get(o["id"], set())) for o in obs]
    left = budget_chars - sum(v.fixed for v in views)
    # tiers across observations, newest observation and newest line first
    for tier in range(3):
        for v in reversed(views):
            for i in v.tiers[tier]:
                left -= v.take(i, left)
    # head and tail, round robin: each observation gets one line per pass until none fits
    orders = [v.fill_order() for v in views]
    pos = [0] * len(views)
    active = list(range(len(views)))
    while active:
        still = []
        for k in active:
            v, order = views[k], orders[k]
            while pos[k] < len(order) and order[pos[k]] in v.kept:
                pos[k] += 1
            if pos[k] < len(order) and v.fits(order[pos[k]], left):
                left -= v.take(order[pos[k]], left)
                still.append(k)
        active = still
    return [v.render() for v in views]


class _View:
    """One observation being cut to size: its kept line indices and what they cost."""

    def __init__(self, o: Any, cited: set[str]) -> None:
        self.o = o
        self.tiers = _must_keep(o["lines"], cited)
        must = set(self.tiers[0]) if self.tiers else set()
        # a fatal or cited line is shown whole (up to MAX_FATAL_LINE): its end names the cause
        self.lines = [
            ln[: MAX_FATAL_LINE if i in must else MAX_LINE] for i, ln in enumerate(o["lines"])
        ]
        self.kept: set[int] = set()
        #: lines inside a run of lines alike but for their numbers (a heartbeat repeated every
        #: ten seconds): the run's first and last are shown, the rest only counted
        self.repeats = _repeat_runs(o["lines"]) - must if o["tool"] in REPEATING_READS else set()
        header = f"## {o['id']} {o['tool']} {json.dumps(o['args'])} {'ok' if o['ok'] else 'FAILED'}"
        self.fixed = len(header) + 1 + (_MARK_COST if self.lines else 0)

    def cost(self, i: int) -> int:
        n = len(self.lines)
        left_out = i > 0 and i - 1 not in self.kept
        right_out = i < n - 1 and i + 1 not in self.kept
        marks = 1 if (left_out and right_out) else (-1 if not (left_out or right_out) else 0)
        return len(self.lines[i]) + 1 + marks * _MARK_COST

    def fits(self, i: int, left: int) -> bool:
        return i not in self.kept and self.cost(i) <= left

    def take(self, i: int, left: int) -> int:
        """Keep line i if it fits in `left`; return what it cost (0 when not taken)."""
        if not self.fits(i, left):
            return 0
        c = self.cost(i)
        self.kept.add(i)
        return c

    def fill_order(self) -> list[int]:
        """Head and tail alternating, one head line for two tail lines (the end of a log is
        where a launch died), the first line (the read's own summary) first."""
        n = len(self.lines)
        head, tail = 0, n - 1
        out: list[int] = []
        while head <= tail:
            out.append(head)
            head += 1
            for _ in range(2):
                if head <= tail:
                    out.append(tail)
                    tail -= 1
        return [i for i in out if i not in self.repeats]

    def render(self) -> dict[str, Any]:
        o = self.o
        out: list[str] = []
        prev = -1
        for i in sorted(self.kept):
            if i > prev + 1:
                out.append(self._gap(prev + 1, i - 1))
            out.append(self.lines[i])
            prev = i
        if self.lines and prev < len(self.lines) - 1:
            out.append(self._gap(prev + 1, len(self.lines) - 1))
        return {"id": o["id"], "tool": o["tool"], "args": o["args"], "ok": o["ok"], "lines": out}

    def _gap(self, a: int, b: int) -> str:
        if all(i in self.repeats for i in range(a, b + 1)):
            n = b - a + 1
            return (
                f"# … {n} more line{'s' if n != 1 else ''} like the one above, only their "
                f"time stamps differ (lines {a + 1}–{b + 1}) …"
            )
        return _mark(a, b)


#: the stamps a heartbeat changes from one line to the next: dates, clock times (a port, a
#: rank or a pid that differs is a different line, and may be the evidence)
_STAMPS = re.compile(r"\d{1,4}[-/]\d{1,2}[-/]\d{1,4}(?:[T ])?|\d{1,2}:\d{2}:\d{2}(?:[.,]\d+)?Z?")
#: a run shorter than this is shown whole
MIN_REPEAT_RUN = 6
#: the reads whose runs of alike lines are a log's heartbeat; a table's rows (GPUs, processes,
#: mounts) differ only in their numbers and every number matters
REPEATING_READS = frozenset({"log_tail", "container_logs", "service_logs", "log_search"})


def _repeat_runs(lines: list[str]) -> set[int]:
    """Indices inside runs of consecutive lines equal but for their time stamps (a heartbeat),
    each run's first and last line left out of the set."""
    out: set[int] = set()
    keys = [_STAMPS.sub("#", ln.strip()) for ln in lines]
    start = 0
    for i in range(1, len(keys) + 1):
        if i == len(keys) or keys[i] != keys[start] or not keys[start]:
            if i - start >= MIN_REPEAT_RUN:
                out.update(range(start + 1, i - 1))
            start = i
    return out


def _mark(a: int, b: int) -> str:
    n = b - a + 1
    return f"# … {n} line{'s' if n != 1 else ''} not shown (lines {a + 1}–{b + 1}) …"


def _must_keep(lines: list[str], cited: set[str]) -> list[list[int]]:
    """Three tiers of line indices, newest first: [fatal + cited], [traceback tails], [phases]."""
    fatal: set[int] = set()
    tails: set[int] = set()
    for i, ln in enumerate(lines):
        if _FATAL.search(ln) or (cited and ln.strip() in cited):
            fatal.add(i)
    fatal.update(i for i, _ in fatal_lines(lines))  # the proof gate's own notion of fatal
    for start, end, complete in _tracebacks(lines):
        if complete:
            fatal.add(end)
        tails.update(range(max(start, end - TRACEBACK_TAIL + 1), end + 1))
    for m in scan(lines):
        if m.strength == "fatal":
            fatal.add(m.line_no)
    phases = _phase_markers(lines)
    seen_text: set[str] = set()
    tier0 = []
    for i in sorted(fatal, reverse=True):  # the same fatal text repeated: keep its newest copy
        if lines[i] not in seen_text:
            seen_text.add(lines[i])
            tier0.append(i)
    return [
        tier0,
        sorted(tails - fatal, reverse=True),
        sorted(phases - fatal - tails, reverse=True),
    ]


def _tracebacks(lines: list[str]) -> list[tuple[int, int, bool]]:
    """(start, end, complete) of each Python traceback: from its banner to its final exception
    line, the first line after the frames that is not indented (a log prefix before the banner
    removed); not complete when the read was cut inside the frames."""
    out = []
    i = 0
    while i < len(lines):
        m = _TRACEBACK.search(lines[i])
        if not m:
            i += 1
            continue
        prefix = lines[i][: m.start()]
        end, complete = min(len(lines), i + 400) - 1, False
        for j in range(i + 1, min(len(lines), i + 400)):
            body = lines[j][len(prefix) :] if prefix and lines[j].startswith(prefix) else lines[j]
            if _TRACEBACK.search(body) or not body.strip():
                continue
            if not body[:1].isspace() and not body.startswith(("During handling", "The above")):
                end, complete = j, True
                break
        out.append((i, end, complete))
        i = end + 1
    return out


def _phase_markers(lines: list[str]) -> set[int]:
    """Start-up phase lines (progress/ready signatures, `phase-*` ids): the first and last line of
    each kind, so a long progress log cannot fill the budget with itself."""
    by_sig: dict[str, list[int]] = {}
    for m in scan(lines):
        if m.strength in ("progress", "ready") or m.signature.startswith("phase-"):
            by_sig.setdefault(m.signature, []).append(m.line_no)
    out: set[int] = set()
    for hits in by_sig.values():
        out.update((hits[0], hits[-1]))
    return out
