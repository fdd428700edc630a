"""Every command x every option it accepts, and where each option applies (issue 45), as a markdown table.

    python -m attnflow.cli.option_table

Generated, not written per command: the options are the commands' own (typer's), where a setting or an
entry point's keyword applies comes from its row (``attnflow.config.settings.OPTIONS`` and
``ENTRY_OPTIONS``: ``scope``, ``models``) and from the method records that read it (``Method.reads``),
narrowed to the methods the command offers. Every other combination is refused before any work by the
one check generated from the same rows (``attnflow.api.checks.check_options``).
"""

from __future__ import annotations

from typing import Any

# command-line flags that spell an entry point's keyword under another name (``--by``/``--spans``: spans=)
SPELLED = {"--by": "spans", "--spans": "spans", "--class": "target_class"}
ALWAYS = "every use of the command"


def _commands() -> dict[str, Any]:
    import typer.main

    import attnflow.cli  # noqa: F401  (the commands register themselves)
    from attnflow.cli.app import app

    return dict(typer.main.get_command(app).commands)


def _offered(command: Any) -> list[str] | None:
    """The methods a command's ``--method`` offers (None: it has no such choice)."""
    from attnflow.config import registry

    for param in command.params:
        if param.name in ("method", "methods"):
            # typer's parameters describe their type (click's carry it as .type)
            kind = getattr(param, "type_descriptor", None) or getattr(param, "type", None)
            choices = getattr(kind, "choices", None)
            if choices:
                names = [str(getattr(c, "value", c)) for c in choices]
                return [n for n in names if n in registry.REGISTRY]
            return list(registry.names("text"))  # batch's comma-separated --methods
    return None


def where(option: Any, offered: list[str] | None) -> str:
    """Where ``option`` (an ``Option``) changes a result, in words."""
    from attnflow.api.checks import _PLURAL
    from attnflow.config import registry
    from attnflow.config.settings import ANY, EVERY

    parts = []
    if option.scope in (ANY, EVERY):
        readers = [m.name for m in registry.REGISTRY.values() if option.name in m.reads
                   and (offered is None or m.name in offered)]
        if not readers:
            return "nowhere: refused with every method this command offers"
        parts.append(("a method computed reads it: " if option.scope == ANY else "every method named reads it: ")
                     + ", ".join(readers))
    if option.models is not None:
        parts.append("on " + " and ".join(_PLURAL[k] for k in option.models) + " only")
    return "; ".join(parts) or ALWAYS


def rows() -> list[tuple[str, str, str | None, str]]:
    """``(command, flag, the option row's name or None, where it applies)`` for every option of every
    command, in the order ``attnflow --help`` lists them."""
    from attnflow.config.settings import rule

    out = []
    for name, command in _commands().items():
        offered = _offered(command)
        for param in command.params:
            if getattr(param, "param_type_name", None) != "option" or param.name == "help":
                continue
            flag = max(param.opts, key=len)
            option = rule(SPELLED.get(flag, param.name))
            checked = option is not None and (option.scope is not None or option.models is not None)
            out.append((name, flag, option.name if checked else None, where(option, offered) if checked else ALWAYS))
    return out


def markdown() -> str:
    """The table (markdown), and the rule for what it does not list."""
    lines = ["| command | option | applies where |", "| --- | --- | --- |"]
    table = rows()
    for command in dict.fromkeys(c for c, _, _, _ in table):  # the options that always apply in one row
        always = [f"`{flag}`" for c, flag, name, _ in table if c == command and name is None]
        if always:
            lines.append(f"| `{command}` | {', '.join(always)} | {ALWAYS} |")
        lines += [f"| `{command}` | `{flag}` | {text} |" for c, flag, name, text in table
                  if c == command and name is not None]
    lines.append("")
    lines.append("Any other combination (an option away from its default where it applies nowhere in the call: "
                 "another method, another kind of model) is refused before any work, in one line, exit 2, nothing "
                 "written: `attnflow.api.checks.check_options`, generated from the same option rows and method "
                 "records.")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown())
