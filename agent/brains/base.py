"""The policy seam: given the board and the options, what should the agent do next?"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict

from agent.checks import CheckOption
from agent.facts import Facts
from agent.followup import Answer, Known
from agent.state import Action, State


class BrainContext(BaseModel):
    """Everything a brain may consult besides the state: derived, never raw host text to obey.

    Named apart from `agent.context.RunContext` (what a run is given: host, limits, memory) and
    the overnight loop's own context; `Context` stays as an alias for code written before."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    options: list[CheckOption]
    facts: Facts
    changes_possible: list[Action] = []
    budget_left: dict[str, float] = {}


#: the old name, for code written before the rename
Context = BrainContext


class Brain(Protocol):
    name: str

    def decide(self, state: State, ctx: BrainContext) -> Action:
        """One next step: a check, a change (needs approval), a conclusion, or insufficient."""
        ...

    def follow_up(self, state: State, text: str, ctx: BrainContext) -> tuple[str, list[Action]]:
        """Answer an operator's follow-up and name the checks it asks for."""
        ...

    def explain(self, question: str, answer: Answer, known: Known) -> str:
        """Say `answer` (the rulebook's reply over `known`) to the operator, in prose."""
        ...

    def tokens_used(self) -> int: ...
