"""Host-fact rules, by family: memory (agent/rules_memory.py), liveness (rules_liveness.py) and
the host (rules_host.py), over what they share (rules_common.py); causes, hangs and structure
live in rules_causes.py, rules_hang.py and rules_structure.py. This module gathers the first
three under the names the rest of the agent imports. None of them knows a particular incident.
"""

from agent.rules_common import (  # noqa: F401
    ALLOC,
    EXCEPTION_LINE,
    HW_ERROR,
    MEMORY_LABELS,
    MEMORY_PHASES,
    OOM_LABELS,
    OOM_NAMES_A_PID,
    OTHER_PROC_MEM,
    PHASE_PREFIX,
    STRONG_CAP,
    TORCH_HELD,
    WEIGHT,
    WORKER,
)
from agent.rules_host import host_rules  # noqa: F401
from agent.rules_liveness import liveness_rules  # noqa: F401
from agent.rules_memory import (  # noqa: F401
    died_for_memory,
    launch_gone,
    leftover_holders,
    oom_at_device_init,
    oom_phase,
    search_rules,
    stale_gpu_possible,
    stale_rules,
)
