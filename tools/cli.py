"""`pivot tools NAME`: run any registered tool by hand, on a host, locally or on a replayed card.

One subcommand per entry of `tools.registry.TOOLS`, so a tool written tomorrow shows up here
without touching this file. Scalar fields of a tool's `Args` become typed options
(`--path`, `--lines`); anything else (lists, dicts) goes through `--arg key=value`, where a
dotted key builds a dict (`--arg set.NCCL_ALGO=Ring`), a repeated key builds a list and a value
starting with `[` or `{` is JSON. Changing tools refuse to run without `--yes`.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from typing import Annotated, Any, Literal, Union

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.text import Text

from tools.base import ToolSpec
from tools.registry import TOOLS

_COMMON = {"host", "local", "replay", "arg", "json_out", "yes"}
_SCALARS = (str, int, float, bool)


def _scalar_type(annotation: Any) -> type | None:
    """The plain type behind `int`, `str | None`, `Literal['a', 'b']`; None for lists/dicts."""
    if annotation in _SCALARS:
        return annotation
    origin = typing.get_origin(annotation)
    if origin is Literal:
        values = typing.get_args(annotation)
        return type(values[0]) if values and isinstance(values[0], _SCALARS) else None
    if origin in (Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return _scalar_type(inner[0])
    return None


def parse_pairs(pairs: list[str], model: type[BaseModel]) -> dict[str, Any]:
    """`key=value` strings into a dict for `model`; raises ValueError on a malformed pair."""
    out: dict[str, Any] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--arg wants key=value, got {pair!r}")
        key, raw = pair.split("=", 1)
        value: Any = raw
        if raw[:1] in ("[", "{"):
            try:
                value = json.loads(raw)
            except ValueError as exc:
                raise ValueError(f"--arg {key}: value looks like JSON but is not: {exc}") from exc
        if "." in key:
            top, sub = key.split(".", 1)
            out.setdefault(top, {})
            if not isinstance(out[top], dict):
                raise ValueError(f"--arg {top} given both as a value and as {top}.KEY")
            out[top][sub] = value
            continue
        field = model.model_fields.get(key)
        is_list = field is not None and typing.get_origin(_strip_optional(field.annotation)) is list
        if key in out or is_list:
            prev = out.get(key, [])
            prev = prev if isinstance(prev, list) else [prev]
            out[key] = prev + (value if isinstance(value, list) else [value])
        else:
            out[key] = value
    return out


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(inner) == 1:
            return inner[0]
    return annotation


def _render(result: Any, console: Console) -> None:
    for line in result.lines():
        style = "dim" if line.startswith("# ") else None
        if line.startswith(("# error:", "# fix:")):
            style = "bold red"
        console.print(Text(line, style=style or ""), soft_wrap=True)


def _make_command(spec: ToolSpec) -> Any:
    fields = {
        name: f
        for name, f in spec.args.model_fields.items()
        if name not in _COMMON and _scalar_type(f.annotation) is not None
    }

    def command(**kw: Any) -> None:
        if spec.changing and not kw.get("yes"):
            typer.echo(
                f"{spec.name} changes the host; nothing done. Re-run with --yes to approve.",
                err=True,
            )
            raise typer.Exit(3)
        try:
            values = parse_pairs(kw.get("arg") or [], spec.args)
            values.update({k: v for k, v in kw.items() if k in fields and v is not None})
            args = spec.args.model_validate(values)
        except (ValueError, ValidationError) as exc:
            typer.echo(f"bad arguments for {spec.name}: {exc}", err=True)
            raise typer.Exit(2) from exc
        from tools.hosts import resolve_host  # lazy: keeps `pivot --help` free of paramiko

        try:
            host = resolve_host(kw.get("host"), bool(kw.get("local")), kw.get("replay"))
        except ValueError as exc:
            typer.echo(str(exc), err=True)
            raise typer.Exit(2) from exc
        try:
            result = spec.call(host, args)
        finally:
            host.close()
        if kw.get("json_out"):
            typer.echo(result.model_dump_json(indent=2))
        else:
            _render(result, Console())
        if not result.ok:
            raise typer.Exit(1)

    params = [
        _opt("host", str | None, "--host", help="SSH alias from ~/.ssh/config"),
        _opt("local", bool, "--local", default=False, help="run on this machine"),
        _opt("replay", str | None, "--replay", help="answer from an incident card (YAML)"),
        _opt("json_out", bool, "--json", default=False, help="print the typed result as JSON"),
        _opt("arg", list[str] | None, "--arg", "-a", help="key=value for any Args field"),
    ]
    if spec.changing:
        params.append(_opt("yes", bool, "--yes", default=False, help="approve the change"))
    for name, f in fields.items():
        typ = _scalar_type(f.annotation)
        flag = "--" + name.replace("_", "-")
        help_text = f.description or ""
        if typ is bool:
            params.append(_opt(name, bool | None, f"{flag}/--no-{flag[2:]}", help=help_text))
        else:
            params.append(_opt(name, typ | None, flag, help=help_text))
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = {p.name: p.annotation for p in params}
    command.__doc__ = spec.description + (
        " Changes the host: needs --yes." if spec.changing else ""
    )
    return command


def _opt(
    name: str, typ: Any, *decls: str, default: Any = None, help: str = ""
) -> inspect.Parameter:
    return inspect.Parameter(
        name,
        inspect.Parameter.KEYWORD_ONLY,
        default=default,
        annotation=Annotated[typ, typer.Option(*decls, help=help)],
    )


def build_app() -> typer.Typer:
    tools_app = typer.Typer(
        name="tools",
        help="Run one host tool: pivot tools NAME (--host ALIAS | --local | --replay CARD.yaml).",
        no_args_is_help=True,
    )

    @tools_app.command("list")
    def list_tools() -> None:
        """List the tools with what they do; changing ones are marked."""
        console = Console()
        for name, spec in sorted(TOOLS.items()):
            mark = " [changes the host]" if spec.changing else ""
            console.print(Text(f"{name}{mark}", style="bold"), soft_wrap=True)
            console.print(Text(f"    {spec.description}"), soft_wrap=True)

    for name, spec in TOOLS.items():
        tools_app.command(name, help=_make_command(spec).__doc__)(_make_command(spec))
    return tools_app


def register(app: typer.Typer) -> None:
    app.add_typer(build_app(), name="tools")
