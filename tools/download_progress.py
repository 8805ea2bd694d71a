"""`download_progress`: is a silent start-up really downloading the weights?

vLLM and SGLang fetch a hub model (`vllm serve org/name`) before loading it, and in a pod or
under a process manager the download prints no progress bar: the log stops at "Using model
weights format" for twenty minutes and the launch looks hung. The Hugging Face cache says
otherwise: a `blobs/*.incomplete` file that grows between two reads is a download in progress.
Read-only: `ls -l` of the model's blobs directory in each candidate cache, polled over a window
on the host's clock (virtual on replay), stopping as soon as a blob grows.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, Field

from tools.base import ToolResult, ToolSpec
from tools.host import Host
from tools.log_window import max_window_s, poll_interval

#: the hub caches tried, in order, when none is given (HF_HUB_CACHE / HF_HOME/hub come first
#: when the caller knows them from the launch environment)
DEFAULT_CACHES = ("~/.cache/huggingface/hub", "/root/.cache/huggingface/hub")
_LS_ROW = re.compile(r"^[-l]\S+\s+\d+\s+\S+\s+\S+\s+(\d+)\s+.*?\s(\S+)$")
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class Args(BaseModel):
    model: str = Field(
        description="the hub model id the server was given, e.g. openai/gpt-oss-120b"
    )
    caches: list[str] = Field(
        default_factory=list,
        description="hub cache directories to look in (HF_HUB_CACHE, $HF_HOME/hub); the usual "
        "~/.cache/huggingface/hub when empty",
    )
    watch_s: float | None = Field(
        None,
        ge=0,
        le=600,
        description="poll this long for growth (stops early when a blob grows); default four "
        "liveness windows (PIVOT_LIVENESS_MAX_S x 4, 120 s), since a download is checked only "
        "when the log already went quiet",
    )


class Blob(BaseModel):
    name: str
    size: int
    incomplete: bool
    line: str = Field("", description="the ls line, to cite")


class Result(ToolResult):
    model: str = ""
    directory: str | None = Field(None, description="the blobs directory found")
    blobs: list[Blob] = Field(default_factory=list)
    grew_bytes: int | None = Field(None, description="growth of the .incomplete blobs, if watched")
    waited_s: float = 0.0
    downloading: bool | None = Field(
        None, description="True: a blob grew; False: .incomplete blobs did not grow; None: unknown"
    )
    growing_line: str = Field("", description="the newest ls line of the blob that grew")
    du_lines: list[str] = Field(
        default_factory=list, description="du of the model's cache directory, before and after"
    )
    cache_grew: bool = Field(
        False, description="the growth was seen by du of the model's cache directory, not ls"
    )

    def lines(self) -> list[str]:
        if self.error:
            return super().lines()
        out = [b.line for b in self.blobs if b.line] + self.du_lines
        done = sum(b.size for b in self.blobs if not b.incomplete)
        partial = [b for b in self.blobs if b.incomplete]
        out.append(
            f"# {self.directory}: {len(self.blobs) - len(partial)} complete blobs "
            f"({done / 2**30:.1f} GiB), {len(partial)} still downloading (.incomplete)"
        )
        if self.downloading:
            rate = (self.grew_bytes or 0) / max(self.waited_s, 1e-3) / 2**20
            what = "the model's cache directory" if self.cache_grew else ".incomplete blobs"
            out.append(
                f"# downloading: {what} grew {(self.grew_bytes or 0) / 2**20:.0f} MiB "
                f"in {self.waited_s:.0f} s (~{rate:.0f} MiB/s)"
            )
        elif self.downloading is False:
            out.append(f"# .incomplete blobs did not grow in {self.waited_s:.0f} s: stalled")
        return out + super().lines()


def parse_ls(text: str) -> list[Blob]:
    out = []
    for line in text.splitlines():
        m = _LS_ROW.match(line.strip())
        if m:
            name = m.group(2)
            out.append(
                Blob(
                    name=name,
                    size=int(m.group(1)),
                    incomplete=name.endswith(".incomplete"),
                    line=line,
                )
            )
    return out


def blobs_dir(cache: str, model: str) -> str:
    org, _, name = model.partition("/")
    return f"{cache.rstrip('/')}/models--{org}--{name}/blobs/"


def _quote(path: str) -> str:
    # ~ must expand on the host: keep it outside the quotes
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


def _read(host: Host, directory: str, unread: list[str] | None = None) -> list[Blob] | None:
    """The blobs listed in `directory`, or None. A listing never made (a lost connection, a
    replayed card that did not record it) is noted in `unread`: unknown, not "no cache"."""
    res = host.run(f"ls -l {_quote(directory)}", timeout=10, max_bytes=200_000)
    if not res.ok and res.rc is None and res.error and unread is not None:
        unread.append(res.error)
    return parse_ls(res.stdout) if res.ok else None


_DU = re.compile(r"^\s*([\d.]+)([KMGTP]?)i?B?\s+\S", re.I)
_UNIT = {"": 1024, "K": 1024, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50}


def parse_du(text: str) -> int | None:
    """Bytes of `du -sk DIR` (KiB, no suffix), or of `du -sh DIR` ("101G") where that is what
    came back (a card records what its author typed)."""
    for line in text.splitlines():
        m = _DU.match(line)
        if m:
            return int(float(m.group(1)) * _UNIT[m.group(2).upper()])
    return None


def _du(host: Host, blobs: str) -> tuple[int, str] | None:
    """The model's whole cache directory, in bytes, and du's line: a second witness beside the
    blob listing (hf_transfer and some hub versions write to a temporary name, or to parts)."""
    res = host.run(f"du -sk {_quote(blobs.rstrip('/').rsplit('/', 1)[0])}", timeout=10)
    size = parse_du(res.stdout) if res.ok else None
    return None if size is None else (size, res.stdout.strip().splitlines()[0])


def run(host: Host, args: Args) -> Result:
    if not _HUB_ID.match(args.model):
        return Result(
            host=host.name,
            ok=False,
            model=args.model,
            error=f"{args.model!r} is not a hub model id (org/name): a local path downloads nothing",
            fix="check the model path exists and is readable instead (model_file, ls)",
        )
    caches = list(dict.fromkeys([*args.caches, *DEFAULT_CACHES]))
    directory, first = None, None
    unread: list[str] = []
    for cache in caches:
        d = blobs_dir(cache, args.model)
        first = _read(host, d, unread)
        if first is not None:
            directory = d
            break
    if (directory is None or first is None) and unread:
        return Result(
            host=host.name,
            ok=False,
            model=args.model,
            error=f"the hub cache for {args.model} could not be listed on {host.name}: "
            f"{unread[0][:200]}",
            fix="list the cache on the host itself (ls -l <cache>/models--org--name/blobs); "
            "until then whether it downloads is unknown",
        )
    if directory is None or first is None:
        return Result(
            host=host.name,
            ok=False,
            model=args.model,
            error=f"no hub cache for {args.model} in {', '.join(caches)} on {host.name}",
            fix="pass the cache the server uses (HF_HOME/hub or HF_HUB_CACHE, --download-dir)",
        )
    partial0 = {b.name: b.size for b in first if b.incomplete}
    res = Result(host=host.name, model=args.model, directory=directory, blobs=first)
    if not partial0:
        return res  # nothing in flight: complete (or not started); the blobs say which
    window = args.watch_s if args.watch_s is not None else 4 * max_window_s()
    t0 = host.clock()
    blobs = first
    du0 = _du(host, directory)
    while host.clock() - t0 < window:
        elapsed = host.clock() - t0
        host.sleep(min(poll_interval(elapsed, heavy=True), window - elapsed))
        nxt = _read(host, directory)
        if nxt is None:
            break
        blobs = nxt
        now = {b.name: b.size for b in blobs}
        grew = sum(max(0, now.get(n, 0) - s) for n, s in partial0.items())
        landed = [n for n in partial0 if n not in now]  # renamed to its final name: finished
        du1 = _du(host, directory) if du0 is not None and not grew else None
        du_grew = max(0, du1[0] - du0[0]) if du0 is not None and du1 is not None else 0
        if (
            grew
            or landed
            or du_grew
            or len([b for b in blobs if not b.incomplete]) > len(first) - len(partial0)
        ):
            res.grew_bytes = grew or du_grew
            res.cache_grew = not grew and bool(du_grew)
            if res.cache_grew and du0 is not None and du1 is not None:
                res.du_lines = [du0[1], du1[1]]
            res.downloading = True
            res.growing_line = (
                res.du_lines[-1]
                if res.du_lines
                else next(
                    (
                        b.line
                        for b in blobs
                        if b.incomplete and now[b.name] > partial0.get(b.name, 0)
                    ),
                    blobs[-1].line if blobs else "",
                )
            )
            break
    else:
        res.downloading = False
    res.blobs = blobs
    res.waited_s = round(host.clock() - t0, 3)
    return res


SPEC = ToolSpec(
    name="download_progress",
    description=(
        "Whether a server that went quiet while fetching a hub model (vllm serve org/name, "
        "--model-path org/name) is still downloading it: the Hugging Face cache's "
        "blobs/*.incomplete files read twice over a window (ls -l only). A blob that grows is "
        "a download in progress (still starting, not hung)."
    ),
    args=Args,
    result=Result,
    fn=run,
)
