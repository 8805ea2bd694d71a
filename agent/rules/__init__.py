"""The proof and the rules: what a line proves, what a conclusion must show, what the host shows.

- `proof`: what a log line proves by its shape (fatal by structure, a phase marker, a quote);
- `guardrails`: the gate, one proof table (`RULES`, a rule per label) both brains pass through;
- the rule families, each turning observations into signed findings: memory, liveness and the
  host (over what they share, `common`), causes over symptoms, hangs, the fatal lines no
  signature knows (`structure`) and the stages a launch got past (`passed`).

None of them knows a particular incident; the knowledge they read is in agent/knowledge/.
May import the agent's lower modules (state, evidence, facts, hits, launch, kills, containers,
signatures, board) and `tools`; never the graph, the nodes or the brains, which import the rules.
"""
