"""Run incident cards through the real investigation graph on a `ReplayHost`, and score them.

Why it is shaped like this:
- Each worker builds ONE `Runner` and reuses it for every card it gets: building the graph and
  opening its SQLite files costs more than replaying a small card.
- `--jobs N` means N worker *processes* (forkserver, preloaded with the agent), because the
  rulebook brain is CPU-bound Python and threads would share one GIL.
- Each worker has its own `Settings(home=...)` under one temporary root, so memory and
  checkpoints never collide and nothing lands in the operator's ~/.pivot.
- A bad card or a run that raises becomes an `error` result naming file and problem; the other
  cards still run. Only a broken harness (a worker process dying) raises.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from pathlib import Path

from pydantic import BaseModel, Field

from cards.model import CardError, IncidentCard, load_card
from evals.scoring import CardPassAtK, CardResult, Summary, failed_run, pass_at_k, score, summarize

ResultSink = Callable[[CardResult], None]


class EvalOptions(BaseModel):
    brain: str = "rulebook"
    jobs: int = Field(1, ge=1)
    repeat: int = Field(1, ge=1)
    #: LLM brain: keep every model turn here / answer model turns from here (offline)
    record_dir: Path | None = None
    replay_dir: Path | None = None


class EvalRun(BaseModel):
    """What `pivot eval --json` writes: the summary, one result per card run, and pass@k."""

    summary: Summary
    results: list[CardResult]
    pass_at_k: list[CardPassAtK] | None = None
    brain: str = "rulebook"


class LoadedCard(BaseModel):
    path: str
    card: IncidentCard


# -- finding and loading cards --------------------------------------------------------------------
def discover(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Every *.yaml under the given files and directories, sorted, each once.

    A path that does not exist is a usage error (ValueError): a typo must not pass CI silently
    by evaluating zero cards.
    """
    found: dict[Path, None] = {}
    for p in map(Path, paths):
        if p.is_dir():
            for f in sorted(p.rglob("*.yaml")):
                found[f.resolve()] = None
        elif p.is_file():
            found[p.resolve()] = None
        else:
            raise ValueError(f"{p}: no such file or directory")
    return list(found)


def load_cards(files: Iterable[Path]) -> tuple[list[LoadedCard], list[CardResult]]:
    """Valid cards, and an `error` result for every card that does not load (CardError text)."""
    cards: list[LoadedCard] = []
    errors: list[CardResult] = []
    for f in files:
        try:
            card = load_card(f)
        except CardError as exc:
            errors.append(failed_run(f.stem, str(f), str(exc)))
            continue
        if card.expected is None:
            errors.append(
                failed_run(
                    card.id,
                    str(f),
                    f"{f}: expected: missing (a captured draft: fill expected.root_cause first)",
                )
            )
            continue
        cards.append(LoadedCard(path=str(f), card=card))
    return cards, errors


# -- the worker: one Runner, many cards -----------------------------------------------------------
class _Worker:
    def __init__(self, root: str, options: EvalOptions, in_memory: bool = True) -> None:
        from agent.runner import Runner
        from agent.settings import Settings

        home = Path(root) / f"worker-{os.getpid()}-{id(self):x}"
        home.mkdir(parents=True, exist_ok=True)
        self.brain = options.brain
        self.settings = Settings(
            home=home,
            # An eval run never resumes in another process and nobody reads its trajectory
            # later, so SQLite stays in memory: per-step checkpoint commits were most of the
            # cost of a replayed card on disk.
            memory_db=Path(":memory:") if in_memory else home / "memory.db",
            checkpoint_db=Path(":memory:") if in_memory else home / "checkpoints.db",
            brain=options.brain,
            checkpoint_durability="exit",  # nothing resumes an eval run mid-way
            database_url=None,  # evals stay hermetic even where a team database is configured
            llm_record_dir=options.record_dir,
            llm_replay_dir=options.replay_dir,
        )
        self.runner = Runner(self.settings)

    def run(self, job: tuple[LoadedCard, int]) -> CardResult:
        from agent.runner import investigate
        from cards.replay import ReplayHost

        loaded, attempt = job
        card = loaded.card
        start = time.perf_counter()
        try:
            host = ReplayHost(card)
            if card.invocation.container:  # --container NAME, exactly as the CLI passes it
                from tools.container_host import ContainerHost

                host = ContainerHost(host, card.invocation.container)
            report = investigate(
                host,
                card.symptom,
                brain=self.brain,
                settings=self.settings,
                runner=self.runner,
                logs=[card.invocation.log] if card.invocation.log else None,
                configs=[card.invocation.config] if card.invocation.config else None,
            )
        except Exception as exc:  # an agent bug on this card: record it, run the others
            tb = traceback.extract_tb(exc.__traceback__)[-1]
            res = failed_run(
                card.id,
                loaded.path,
                f"{loaded.path}: the run raised {type(exc).__name__}: {str(exc)[:300]} "
                f"(at {Path(tb.filename).name}:{tb.lineno})",
                expected=card.expected.root_cause if card.expected else None,
            )
            res.attempt = attempt
            res.seconds = time.perf_counter() - start
            return res
        res = score(card, report, path=loaded.path, seconds=time.perf_counter() - start)
        res.attempt = attempt
        return res

    def close(self) -> None:
        self.runner.close()


_worker: _Worker | None = None


def _init_process(root: str, options: EvalOptions) -> None:
    global _worker
    _worker = _Worker(root, options)


def _run_in_process(job: tuple[LoadedCard, int]) -> CardResult:
    assert _worker is not None, "worker not initialised"
    return _worker.run(job)


def _ping(delay: float) -> int:
    time.sleep(delay)
    return os.getpid()


# -- the evaluator --------------------------------------------------------------------------------
class Evaluator:
    """Holds the workers so several runs (a warm-up, then timed runs) reuse them."""

    def __init__(self, options: EvalOptions | None = None) -> None:
        self.options = options or EvalOptions()
        self._root = tempfile.mkdtemp(prefix="pivot-eval-", dir=_scratch_dir())
        self._pool: ProcessPoolExecutor | None = None
        self._local: _Worker | None = None
        if self.options.jobs > 1:
            ctx = mp.get_context("forkserver")
            ctx.set_forkserver_preload(["agent.runner", "evals.harness"])
            self._pool = ProcessPoolExecutor(
                max_workers=self.options.jobs,
                mp_context=ctx,
                initializer=_init_process,
                initargs=(self._root, self.options),
            )
        else:
            self._local = _Worker(self._root, self.options)

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def warm(self) -> None:
        """Start every worker process (imports, Runner) before anything is timed."""
        if self._pool is None:
            return
        seen: set[int] = set()
        for _ in range(5):
            futs = [self._pool.submit(_ping, 0.05) for _ in range(self.options.jobs * 2)]
            seen |= {f.result() for f in futs}
            if len(seen) >= self.options.jobs:
                return

    def run(self, cards: list[LoadedCard], on_result: ResultSink | None = None) -> list[CardResult]:
        """Every card, `repeat` times; results come back in card order, attempts grouped."""
        jobs = [(c, a) for a in range(self.options.repeat) for c in cards]
        out: list[CardResult | None] = [None] * len(jobs)
        if self._local is not None:
            for i, job in enumerate(jobs):
                out[i] = res = self._local.run(job)
                if on_result:
                    on_result(res)
        else:
            assert self._pool is not None
            pending: dict[Future[CardResult], int] = {
                self._pool.submit(_run_in_process, job): i for i, job in enumerate(jobs)
            }
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = pending.pop(fut)
                    out[i] = res = fut.result()  # BrokenProcessPool: the harness failed
                    if on_result:
                        on_result(res)
        results = [r for r in out if r is not None]
        return sorted(results, key=lambda r: (r.path, r.attempt))

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._local is not None:
            self._local.close()
            self._local = None
        shutil.rmtree(self._root, ignore_errors=True)


def evaluate(
    paths: Iterable[str | os.PathLike[str]],
    options: EvalOptions | None = None,
    on_result: ResultSink | None = None,
    on_start: Callable[[int], None] | None = None,
) -> EvalRun:
    """Discover, load, run and score: the whole of `pivot eval` minus the presentation.

    `on_start(total_runs)` is called once the cards are loaded (for a progress bar); bad cards
    are reported through `on_result` first, as errors.
    """
    options = options or EvalOptions()
    cards, errors = load_cards(discover(paths))
    if on_start:
        on_start(len(cards) * options.repeat + len(errors))
    for e in errors:
        if on_result:
            on_result(e)
    with Evaluator(options) as ev:
        ev.warm()
        start = time.perf_counter()
        results = ev.run(cards, on_result) if cards else []
        seconds = time.perf_counter() - start
    results = sorted(errors + results, key=lambda r: (r.path, r.attempt))
    return EvalRun(
        summary=summarize(results, seconds, options.repeat),
        results=results,
        pass_at_k=pass_at_k(results) if options.repeat > 1 else None,
        brain=options.brain,
    )


def run_paths(paths: list[str], brain: str = "rulebook", jobs: int = 1, repeat: int = 1) -> EvalRun:
    """Entry point for the service (server/routers/evals.py): paths in, scored run out."""
    return evaluate(paths, EvalOptions(brain=brain, jobs=jobs, repeat=repeat))


def _scratch_dir() -> str | None:
    """Workers' memory and checkpoints are throwaway: keep them on tmpfs when there is one.

    The SQLite checkpointer commits (and fsyncs) after every graph step; on a disk that is most
    of a replayed card's cost, on tmpfs it is almost nothing.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return str(shm)
    return None
