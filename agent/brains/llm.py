"""`LLMBrain`: the same graph with a smarter policy, over any OpenAI-compatible endpoint.

The model sees the board, the suggested checks and bounded observations (marked as untrusted
data) and answers with exactly one typed tool call. Unknown tools, malformed arguments and
invented evidence are refused and retried; the guardrails in code decide whether a conclusion
stands. Turns can be recorded to a directory and replayed offline (evals in CI).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from openai import OpenAI, OpenAIError
from pydantic import BaseModel, Field, ValidationError

from agent.board import ranked
from agent.brains.base import Context
from agent.state import Action, State
from prompts import render
from tools.registry import TOOLS
from tools.taxonomy import LABELS, TAXONOMY

#: Observations in the prompt are cut to keep one decision well under 8k tokens.
MAX_OBS_LINES = 24
MAX_LINE = 240


class Cited(BaseModel):
    observation: str
    line: str = Field(min_length=1)


class Conclude(BaseModel):
    label: str
    evidence: list[Cited] = Field(min_length=1, max_length=5)
    ruled_out: list[str] = Field(default_factory=list)
    next_step: str = ""
    confidence: float = Field(0.7, ge=0, le=1)
    summary: str = ""


class Insufficient(BaseModel):
    why: str = ""


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
                    "parameters": spec.json_schema(),
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

    def tokens_used(self) -> int:
        return self._tokens

    # -- transport with record / replay --------------------------------------------------------------
    def _complete(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], choice: str
    ) -> dict[str, Any]:
        key = _turn_key(self.model, messages, tools, choice)
        if self.replay_dir is not None:
            path = Path(self.replay_dir) / f"{key}.json"
            if not path.exists():
                raise LookupError(
                    f"no recorded model turn {path.name} in {self.replay_dir}: re-record with --record"
                )
            data = json.loads(path.read_text())
        else:
            assert self._client is not None
            resp = self._client.chat.completions.create(
                model=self.model, messages=messages, tools=tools, tool_choice=choice, temperature=0
            )  # type: ignore[arg-type]
            data = resp.model_dump(mode="json")
            if self.record_dir is not None:
                Path(self.record_dir).mkdir(parents=True, exist_ok=True)
                (Path(self.record_dir) / f"{key}.json").write_text(json.dumps(data, indent=1))
        self._tokens += int((data.get("usage") or {}).get("total_tokens") or 0)
        return data

    # -- policy ----------------------------------------------------------------------------------------
    def decide(self, state: State, ctx: Context) -> Action:
        messages = [
            {"role": "system", "content": render("system.j2", taxonomy=TAXONOMY)},
            {
                "role": "user",
                "content": render(
                    "decide.j2",
                    symptom=state.get("symptom", ""),
                    notes=state.get("notes", []),
                    board=ranked(state.get("hypotheses", {})),
                    options=[o.model_dump() for o in ctx.options[:6]],
                    changes=ctx.changes_possible,
                    rejections=state.get("rejections", [])[-5:],
                    budget={k: round(v, 1) for k, v in ctx.budget_left.items()},
                    observations=_compact(state),
                ),
            },
        ]
        tools = _tool_schemas(changing_ok=True) + CONCLUDE_TOOLS
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
                    ruled_out=[x for x in c.ruled_out if x in LABELS],
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

    def follow_up(self, state: State, text: str, ctx: Context) -> tuple[str, list[Action]]:
        messages = [
            {"role": "system", "content": render("system.j2", taxonomy=TAXONOMY)},
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


def _compact(state: State) -> list[dict[str, Any]]:
    """Bounded observations: the cited lines of the board first, then each read's head and tail."""
    out = []
    for o in state.get("observations", []):
        lines = [ln[:MAX_LINE] for ln in o["lines"]]
        if len(lines) > MAX_OBS_LINES:
            keep = MAX_OBS_LINES // 2
            lines = [*lines[:4], f"# … {len(lines) - keep - 4} lines not shown …", *lines[-(keep):]]
        out.append(
            {"id": o["id"], "tool": o["tool"], "args": o["args"], "ok": o["ok"], "lines": lines}
        )
    return out
