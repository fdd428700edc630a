"""One line for everything that goes wrong on the command line: errors and warnings alike.

``run`` wraps the whole typer application (``attnflow.cli.main`` calls it), so every command,
including ones added later, gets the same treatment without doing anything itself:

- ``AttnflowError`` (bad input, a refusal) -> ``attnflow: error: ...``, exit 2;
- typer's own validation (unknown option value, missing argument, a number out of range, an unknown
  command) -> the same one line instead of its usage box, exit 2;
- ``OSError`` (an unreadable input, an unwritable output, a full disk) -> one line naming the file, exit 2;
- Ctrl-C -> ``attnflow: interrupted; no output file was written``, exit 130;
- anything else is a bug -> one line naming the exception, exit 1 (``ATTNFLOW_DEBUG=1`` re-raises it
  with its traceback);
- Python warnings, ours (``AttnflowWarning``) and the libraries' (matplotlib's
  missing glyphs, PIL's decompression-bomb check, numpy) -> one ``attnflow: warning: ...`` line each,
  repeats dropped.

Commands therefore raise ``AttnflowError`` for bad input and call ``warnings.warn`` for doubtful
input; they never print errors or warnings themselves.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

from attnflow.errors import AttnflowError

PREFIX = "attnflow"
DEBUG_VARIABLE = "ATTNFLOW_DEBUG"

# Library warnings that arrive once per character, per figure or per call: one line each is noise, so
# they are folded into one message per kind (the first occurrence names an example).
_FOLDED = (
    (re.compile(r"Glyph (\d+) \((.*?)\) missing from (?:current )?font\(s\) (.+?)\.?$"),
     lambda m: ("glyph", f"the figure font ({m.group(3)}) has no glyph for some characters "
                         f"(first: {m.group(2)}); they show as empty boxes")),
    (re.compile(r"Image size \((\d+) pixels\) exceeds limit of (\d+) pixels"),
     lambda m: ("bomb", f"an image has {int(m.group(1)):,} pixels, more than PIL's decompression-bomb limit "
                        f"({int(m.group(2)):,}); it was read anyway")),
)


def one_line(text: Any) -> str:
    """A message as one line: whitespace runs (newlines included) become one space."""
    return " ".join(str(text).split())


def error(message: Any, code: int = 2) -> NoReturn:
    print(f"{PREFIX}: error: {one_line(message)}", file=sys.stderr, flush=True)
    sys.exit(code)


def _warning_line(message: Any) -> tuple[str, str]:
    """(key for dropping repeats, the line to print)."""
    text = one_line(message)
    for pattern, fold in _FOLDED:
        found = pattern.search(text)
        if found:
            return fold(found)
    return text, text


@contextmanager
def one_line_warnings() -> Iterator[None]:
    """Print every Python warning raised inside as one ``attnflow: warning:`` line (no file name or
    source line), each distinct message once."""
    seen: set[str] = set()

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        key, text = _warning_line(message)
        if key not in seen:
            seen.add(key)
            print(f"{PREFIX}: warning: {text}", file=sys.stderr, flush=True)

    with warnings.catch_warnings():  # Python's own filters stay: deprecation notices are for developers
        for module in ("torch", "transformers", "huggingface_hub", "accelerate"):
            # Developer notices about the libraries' own internals (deprecations inside them) say
            # nothing about the user's input.
            warnings.filterwarnings("ignore", category=DeprecationWarning, module=module)
            warnings.filterwarnings("ignore", category=FutureWarning, module=module)
        warnings.showwarning = show
        yield


def _usage_message(exc: Any) -> str:
    """typer/click's message without its usage box; pydantic-style "Value error, " prefixes dropped."""
    text = exc.format_message() if hasattr(exc, "format_message") else str(exc)
    text = text.replace("Value error, ", "")
    if text.startswith("Invalid value for"):
        text = "invalid value for" + text[len("Invalid value for"):]
    elif text[:1].isupper() and not text[1:2].isupper():
        text = text[0].lower() + text[1:]
    ctx = getattr(exc, "ctx", None)
    hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
    return one_line(text).rstrip(".") + hint


def _os_message(exc: OSError) -> str:
    what = exc.strerror or type(exc).__name__
    name = exc.filename
    return f"{name!s}: {what}" if name else what


def _usage_errors() -> tuple[type, ...]:
    """typer's argument errors: its own vendored click's (typer >= 0.25) and the click package's."""
    import typer

    kinds: list[type] = [typer.TyperException] if hasattr(typer, "TyperException") else []
    try:
        import click

        kinds.append(click.ClickException)
    except ImportError:
        pass
    return tuple(kinds)


def run(app: Callable[..., Any]) -> NoReturn:
    """Run the typer ``app`` on ``sys.argv`` and exit with its status, every failure as one line."""
    from typer import Abort

    debug = os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")
    with one_line_warnings():
        try:
            code = app(standalone_mode=False)
        except AttnflowError as exc:
            error(exc)
        except _usage_errors() as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `attnflow`: the help is the answer
                print(exc.format_message())
                sys.exit(0)
            error(_usage_message(exc), getattr(exc, "exit_code", 2) or 2)
        except (KeyboardInterrupt, Abort):
            code = 130
        except BrokenPipeError:  # `attnflow ... | head`: the reader left; nothing to report
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)
        except OSError as exc:
            if debug:
                raise
            error(_os_message(exc))
        except MemoryError:
            error("out of memory; try a shorter input, fewer methods, or --method rollout", 1)
        except Exception as exc:  # a bug: still one line, with a way to see where
            if debug:
                raise
            error(f"unexpected {type(exc).__name__}: {one_line(exc) or 'no message'} "
                  f"(this is a bug in attnflow or a library; {DEBUG_VARIABLE}=1 shows the traceback)", 1)
    code = code if isinstance(code, int) else 0
    if code == 130:  # typer turns Ctrl-C into status 130; say what that left behind
        print(f"{PREFIX}: interrupted; no output file was written", file=sys.stderr, flush=True)
    sys.exit(code)
