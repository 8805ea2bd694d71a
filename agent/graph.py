"""The investigation graph: wiring only. Nodes live in nodes.py, policy in brains/.

START ─▶ sweep ─▶ analyze ─▶ decide ─┬─▶ act ─▶ analyze …          (a check)
  │                                   ├─▶ approval ─▶ act | analyze  (a change, interrupt)
  └─▶ follow_up ─▶ act | analyze      └─▶ conclude ─▶ END | decide (guardrail refusal)
"""

from __future__ import annotations

from langgraph.graph import END, START, StateGraph

from agent import nodes
from agent.context import RunContext
from agent.state import State


def build_graph(checkpointer=None):  # type: ignore[no-untyped-def]
    g = StateGraph(State, context_schema=RunContext)
    g.add_node("sweep", nodes.sweep)
    g.add_node("follow_up", nodes.follow_up)
    g.add_node("analyze", nodes.analyze)
    g.add_node("decide", nodes.decide)
    g.add_node("approval", nodes.approval)
    g.add_node("act", nodes.act)
    g.add_node("conclude", nodes.conclude)

    g.add_conditional_edges(START, nodes.route_start, ["sweep", "follow_up"])
    g.add_edge("sweep", "analyze")
    g.add_conditional_edges("follow_up", nodes.route_follow_up, ["act", "analyze"])
    g.add_edge("analyze", "decide")
    g.add_conditional_edges(
        "decide", nodes.route_decision, ["act", "approval", "conclude", "decide"]
    )
    g.add_conditional_edges("approval", nodes.route_approval, ["act", "analyze"])
    g.add_edge("act", "analyze")
    g.add_conditional_edges(
        "conclude", nodes.route_conclusion, {"decide": "decide", "approval": "approval", "end": END}
    )
    return g.compile(checkpointer=checkpointer)
