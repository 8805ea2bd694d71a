"""The night's plan as data: a baseline, ranked one-change experiments, an optional search space.

Validation is where the seeds' worst habit dies: an experiment whose change touches more than
one knob is refused at load time unless the plan says `combined: true` on purpose.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from string import Template
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from loop.knobs import Value, knob_id
from loop.slo import Constraint


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class LoadSweep(_Strict):
    """Load points the benchmark runs at, each once per repeat (`vllm bench sweep` style).

    The benchmark command says `{request_rate}` or `{concurrency}` where the point goes;
    without it `--request-rate R` / `--max-concurrency C` (the flags of both `vllm bench
    serve` and SGLang's `bench_serving`) are appended.
    """

    request_rates: list[float] | None = Field(None, min_length=1)
    concurrencies: list[int] | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one_axis(self) -> LoadSweep:
        if (self.request_rates is None) == (self.concurrencies is None):
            raise ValueError("load: give request_rates or concurrencies (one of them)")
        points = self.request_rates or self.concurrencies or []
        if any(p <= 0 for p in points) or len(set(points)) < len(points):
            raise ValueError("load points must be positive and distinct")
        return self


#: Objectives that rank configs by their capacity under the plan's SLOs (loop/capacity.py).
CAPACITY_OBJECTIVES = ("capacity", "goodput_per_gpu")


class CapacitySearch(_Strict):
    """Per config, the highest load that meets every SLO, by bisection (loop/capacity.py).

    The first probe is `low`; the load doubles until a probe misses an SLO or `high` is
    reached, then bisects until the bracket [met, missed) is `resolution` wide (relative), or
    `max_probes` benchmark runs are spent. The command says `{request_rate}` or
    `{concurrency}` where the load goes, else the flag is appended.
    """

    axis: Literal["request_rate", "concurrency"] = "request_rate"
    low: float = Field(gt=0, description="the first probe; below it the SLOs are 'missed'")
    high: float = Field(gt=0, description="the ceiling; met there, the bracket stays open")
    resolution: float = Field(0.1, gt=0, le=1, description="stop when missed/met - 1 <= this")
    max_probes: int = Field(8, ge=2, le=40, description="benchmark runs per launch, at most")
    gpus: int = Field(1, ge=1, description="GPUs a config uses (goodput per GPU)")
    gpus_flag: str | None = Field(
        None, description="a launch flag whose value is the config's GPUs (--tp-size)"
    )

    @model_validator(mode="after")
    def _range(self) -> CapacitySearch:
        if self.low >= self.high:
            raise ValueError("capacity: low must be below high")
        if self.axis == "concurrency" and not (self.low.is_integer() and self.high.is_integer()):
            raise ValueError("capacity: concurrency bounds are whole numbers")
        return self


class Timeouts(_Strict):
    ready_s: float = Field(600, gt=0, description="launch -> probe answers")
    stall_s: float = Field(180, gt=0, description="alive but log silent this long = hung")
    benchmark_s: float = Field(900, gt=0, description="one benchmark run")
    experiment_s: float = Field(2400, gt=0, description="one experiment, all phases")


class BenchmarkSpec(_Strict):
    command: str
    metric_json_key: str | None = None
    metric_regex: str | None = None
    result_file: str | None = Field(
        None,
        description="the client's result file, read after each run (vllm bench serve "
        "--save-result --result-filename F; sglang bench_serving --output-file F)",
    )
    repeat: int = Field(3, ge=1, le=50)


#: What a server takes from the loop's own environment unless the plan says otherwise: enough
#: to find programs, libraries, caches and credentials, and nothing that tunes the engine.
INHERIT_ENV = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH",
    "CUDA_HOME", "HF_HOME", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VIRTUAL_ENV",
]  # fmt: skip


class Baseline(_Strict):
    launch: str = Field(description="the known-good launch command")
    workdir: str = "."
    env: dict[str, str] = Field(default_factory=dict, description="the server's environment")
    inherit_env: list[str] = Field(
        default_factory=lambda: list(INHERIT_ENV),
        description="variables the server takes from the loop's environment (the rest of the "
        "shell's is NOT passed on: set engine knobs in env)",
    )
    config_file: str | None = Field(
        None, description="file where env knobs live (sitecustomize.py, .env)"
    )
    config_files: list[str] = Field(
        default_factory=list, description="every file the server reads; verified byte for byte"
    )
    port: int = Field(gt=0, lt=65536)
    ready_url: str
    benchmark: BenchmarkSpec
    higher_is_better: bool = True
    noise_runs: int = Field(3, ge=3, description="baseline repeats to measure run-to-run noise")
    remeasure: bool = Field(
        True, description="measure an inconclusive change once more when the budget allows"
    )
    recheck_every: int = Field(
        0,
        ge=0,
        description="measure the baseline again after every N ranked experiments (A/B/A; "
        "one host slot), so drift through the night is not taken for an effect",
    )
    interleave: bool = Field(
        True,
        description="launch the baseline again after every ranked experiment and judge each "
        "change against the baseline launches on either side of it (one host slot); "
        "bench/aa_night.py measures why this is the default",
    )
    max_launches: int = Field(
        3,
        ge=1,
        le=20,
        description="interleaved: launches of a change (each followed by a baseline launch) "
        "before it is called inconclusive; repeats are added only while the budget allows",
    )
    timeouts: Timeouts = Field(default_factory=Timeouts)

    @model_validator(mode="after")
    def _files(self) -> Baseline:
        if self.config_file and self.config_file not in self.config_files:
            self.config_files.insert(0, self.config_file)
        return self


class Experiment(_Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    expect: str = Field("", description="the expected effect, in words")
    env: dict[str, Value] = Field(default_factory=dict, description="keys set in config_file")
    flags: dict[str, Value] = Field(default_factory=dict, description="launch flags")
    combined: bool = Field(False, description="allow a change of several knobs, on purpose")

    @field_validator("flags")
    @classmethod
    def _dashes(cls, v: dict[str, Value]) -> dict[str, Value]:
        for k in v:
            if not k.startswith("-"):
                raise ValueError(f"flag {k!r} must start with '-'")
        return v

    def change(self) -> dict[str, Value]:
        return {
            **{knob_id("env", k): v for k, v in self.env.items()},
            **{knob_id("flag", k): v for k, v in self.flags.items()},
        }

    @model_validator(mode="after")
    def _one_knob(self) -> Experiment:
        knobs = list(self.change())
        if not knobs:
            raise ValueError(f"experiment {self.name!r} changes nothing")
        if len(knobs) > 1 and not self.combined:
            raise ValueError(
                f"experiment {self.name!r} touches {len(knobs)} knobs ({', '.join(knobs)}); "
                "test one change at a time, or mark it `combined: true` on purpose"
            )
        return self


class SearchParam(_Strict):
    knob: str = Field(pattern=r"^(flag:-|env:)\S+$", description="flag:--x or env:KEY")
    type: Literal["int", "float", "categorical"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    choices: list[Value] | None = None

    @model_validator(mode="after")
    def _range(self) -> SearchParam:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError(f"{self.knob}: categorical needs choices")
        elif self.low is None or self.high is None or self.low >= self.high:
            raise ValueError(f"{self.knob}: {self.type} needs low < high")
        return self


class Search(_Strict):
    study: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    trials: int = Field(ge=1)
    params: list[SearchParam] = Field(min_length=1)
    seed: int | None = None


class Policy(_Strict):
    kill_leftovers: bool = Field(False, description="may pre-flight kill leftover servers by pid")
    server_match: list[str] = Field(
        default_factory=list, description="regexes over `ps` args that identify server processes"
    )
    gpu_idle_mib: int = Field(1024, description="per-GPU memory.used that counts as idle")
    min_shm_mb: int = 64
    min_disk_mb: int = 512
    weights_gb: float | None = Field(None, description="for the cheap memory estimate")
    stop_grace_s: float = Field(5.0, ge=0)


class Budget(_Strict):
    night_s: float = Field(8 * 3600, gt=0)
    final_slot: bool = Field(True, description="relaunch the best config at the end, leave it up")


PORT_TOKEN = "{port}"


class HostSpec(_Strict):
    """One host slot of the night, with what differs from the baseline on it.

    Several identical machines need nothing but a name each (`hosts: [gpu1, gpu2]`). Slots
    that share one machine (or machines laid out differently) override the port, the working
    dir, the config file and env here; the baseline writes `{port}` where the port goes in its
    launch command, probe URL, benchmark command, env values and `server_match`.
    """

    name: str = Field(pattern=r"^[A-Za-z0-9._@-]+$", description="the slot's name in the ledger")
    target: str | None = Field(None, description="'local' or an SSH alias; default: name")
    port: int | None = Field(None, gt=0, lt=65536)
    workdir: str | None = None
    config_file: str | None = Field(None, description="this slot's copy of baseline.config_file")
    env: dict[str, str] = Field(default_factory=dict, description="merged over baseline.env")

    @property
    def where(self) -> str:
        return self.target or self.name

    @property
    def local(self) -> bool:
        return self.where in ("local", "localhost")


class Plan(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    hosts: list[str | HostSpec] = Field(default_factory=lambda: ["local"], min_length=1)
    baseline: Baseline
    experiments: list[Experiment] = Field(default_factory=list)
    search: Search | None = None
    policy: Policy = Field(default_factory=Policy)
    budget: Budget = Field(default_factory=Budget)
    maximize: str | None = Field(None, description="the metric to raise (output_throughput)")
    minimize: str | None = Field(
        None,
        description="the metric to lower (p99_ttft_ms); with maximize too, the night has two "
        "objectives: ranked by maximize, searched and reported as a Pareto front",
    )
    constraints: list[str] = Field(
        default_factory=list, description="SLOs every winner keeps: 'p99_ttft_ms <= 500'"
    )
    load: LoadSweep | None = Field(
        None, description="benchmark at each of these load points; SLOs hold at every one"
    )
    capacity: CapacitySearch | None = Field(
        None,
        description="per config, the highest load meeting every SLO (bisection) and goodput "
        "per GPU; rank by it with maximize: capacity | goodput_per_gpu",
    )

    @property
    def ranks_by_capacity(self) -> bool:
        return self.objective in CAPACITY_OBJECTIVES

    @property
    def objective(self) -> str:
        """The metric a change is ranked by."""
        b = self.baseline.benchmark
        return self.maximize or self.minimize or b.metric_json_key or "metric"

    @property
    def objectives(self) -> list[tuple[str, bool]]:
        """(metric, higher is better) per objective: one, or two for a Pareto night."""
        if self.maximize and self.minimize:
            return [(self.maximize, True), (self.minimize, False)]
        return [(self.objective, self.higher_is_better)]

    @property
    def higher_is_better(self) -> bool:
        if self.maximize or self.minimize:
            return bool(self.maximize)
        return self.baseline.higher_is_better

    def slos(self) -> list[Constraint]:
        return [Constraint.parse(c) for c in self.constraints]

    @model_validator(mode="after")
    def _objective(self) -> Plan:
        if self.maximize and self.maximize == self.minimize:
            raise ValueError(f"{self.maximize} cannot be both maximized and minimized")
        b = self.baseline.benchmark
        if not (self.maximize or self.minimize or b.metric_json_key or b.metric_regex):
            raise ValueError(
                "no objective: give maximize:/minimize: (a metric name) or "
                "baseline.benchmark.metric_json_key / metric_regex"
            )
        self.slos()  # each constraint parses, or the plan is refused here
        self._check_capacity()
        return self

    def _check_capacity(self) -> None:
        ranks = self.objective in CAPACITY_OBJECTIVES or self.minimize in CAPACITY_OBJECTIVES
        if ranks and self.capacity is None:
            raise ValueError(f"objective {self.objective!r} needs a capacity: section")
        if self.capacity is None:
            return
        if not self.constraints:
            raise ValueError("capacity: is the highest load meeting the SLOs; give constraints")
        if self.load is not None:
            raise ValueError("capacity: probes its own loads; drop load:")
        if self.minimize in CAPACITY_OBJECTIVES or (ranks and self.minimize):
            raise ValueError("rank by capacity alone: maximize: capacity (or goodput_per_gpu)")

    @model_validator(mode="after")
    def _checks(self) -> Plan:
        names = [e.name for e in self.experiments]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate experiment names: {dupes}")
        if "baseline" in names or any(
            re.fullmatch(r"trial-\d+|final(-baseline)?|combined(-baseline-[ab])?", n) for n in names
        ):
            raise ValueError(
                "experiment names 'baseline', 'final', 'combined' and 'trial-N' are reserved"
            )
        needs_file = any(e.env for e in self.experiments) or (
            self.search and any(p.knob.startswith("env:") for p in self.search.params)
        )
        if needs_file and not self.baseline.config_file:
            raise ValueError("env knobs need baseline.config_file (where they are written)")
        self._check_hosts()
        return self

    def host_specs(self) -> list[HostSpec]:
        return [HostSpec(name=h) if isinstance(h, str) else h for h in self.hosts]

    def _check_hosts(self) -> None:
        specs = self.host_specs()
        names = [h.name for h in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"host names must be unique: {names}")
        b = self.baseline
        if any(h.port for h in specs):
            for field, text in (("launch", b.launch), ("ready_url", b.ready_url)):
                if PORT_TOKEN not in text:
                    raise ValueError(
                        f"a host overrides the port, so baseline.{field} must say {PORT_TOKEN} "
                        "where the port goes"
                    )
        if any(h.config_file for h in specs) and not b.config_file:
            raise ValueError("a host overrides config_file, but the baseline has none")
        # Two slots on one machine must not share a port or a config file.
        by_target: dict[str, list[HostSpec]] = {}
        for h in specs:
            by_target.setdefault("local" if h.local else h.where, []).append(h)
        for target, slots in by_target.items():
            if len(slots) < 2:
                continue
            ports = [h.port or b.port for h in slots]
            files = [h.config_file or b.config_file for h in slots]
            if len(set(ports)) < len(ports) or (b.config_file and len(set(files)) < len(files)):
                raise ValueError(
                    f"host slots {[h.name for h in slots]} share {target}: give each its own "
                    "port and config_file"
                )

    def for_host(self, spec: HostSpec) -> Plan:
        """This plan as seen on one host slot: its port, workdir, config file and env."""
        port = spec.port or self.baseline.port
        b = self.baseline.model_copy(deep=True)

        def fill(text: str) -> str:
            return text.replace(PORT_TOKEN, str(port))

        b.port = port
        b.launch = fill(b.launch)
        b.ready_url = fill(b.ready_url)
        b.benchmark.command = fill(b.benchmark.command)
        b.env = {k: fill(v) for k, v in {**b.env, **spec.env}.items()}
        if spec.workdir:
            b.workdir = spec.workdir
        if spec.config_file and b.config_file:
            b.config_files = [spec.config_file if f == b.config_file else f for f in b.config_files]
            b.config_file = spec.config_file
        policy = self.policy.model_copy(
            update={"server_match": [fill(p) for p in self.policy.server_match]}
        )
        return self.model_copy(update={"baseline": b, "policy": policy})


class PlanError(ValueError):
    """A plan that cannot be read or is not valid, said in one line."""


def load_plan(path: str | Path, variables: dict[str, str] | None = None) -> Plan:
    """Load and validate a plan; `${VAR}` is filled from `variables`, then the environment."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanError(f"{path}: cannot read the plan: {exc.strerror or exc}") from None
    text = Template(text).safe_substitute({**os.environ, **(variables or {})})
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise PlanError(f"{path}:{where} not valid YAML: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise PlanError(f"{path}: a plan is a YAML mapping (name, baseline, experiments, ...)")
    try:
        return Plan.model_validate(data)
    except ValidationError as exc:
        raise PlanError(f"{path}: {_one_line(exc)}") from None


def _one_line(exc: ValidationError) -> str:
    """Pydantic's first error as `where: what` (and how many more there are)."""
    errs = exc.errors()
    first = errs[0]
    where = ".".join(str(p) for p in first["loc"]) or "plan"
    msg = str(first["msg"]).removeprefix("Value error, ")
    more = f" (and {len(errs) - 1} more)" if len(errs) > 1 else ""
    return f"{where}: {msg}{more}"


def plan_digest(plan: Plan) -> str:
    return hashlib.sha256(plan.model_dump_json().encode()).hexdigest()[:16]
