"""The commands README.md and docs/*.md show, found and parsed (never run): helpers of
``test_doc_commands.py``.

A page shows a command in a fenced block (any but a ``python``, ``yaml``, ``toml`` or ``json``
one: a ``text`` block's ``Reproduce it: ...`` line is a command too), in an indented code block
or in inline code (a table cell's included). A command is found where a shell command begins:
at the start of a line, after ``&&``, ``||``, ``;``, ``|`` or ``&``, after ``NAME=value``
environment prefixes, a ``$`` prompt, a wrapper (``env``, ``time``, ``nohup``) or the label
``Reproduce it:`` that the training summary prints before its command. Its arguments end at
the next of those operators or at a ``#`` comment; redirections (``> f``, ``>> f``, ``2>&1``,
``2>/dev/null``) are dropped. Line continuations (a trailing backslash) are joined.

The programs are the product's commands, each with its own parser, taken from
``docs/make_flags.py``'s ``COMMANDS`` (the names of how each is run: the console script, and
``python X.py``, ``torchrun ... X.py`` and ``python -m X`` as its "run as" text gives them),
``python -m ppo_lstm.plot_training``, and the benchmark scripts ``python bench/X.py``.

Placeholders a page writes in a value's place (an all-capitals word such as ``N``, ``F``,
``TRAIN`` or ``HOST:29500``, ``$VAR``, ``<dir>``, ``...``) are replaced by a value the flag's
type and choices accept, so the rest of the command is still checked; usage brackets
(``[--out PNG]``) are dropped, and a ``...`` that stands for more flags is left out.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import importlib.util
import io
import os
import re
import runpy
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^[ \t]*(```|~~~)([\w-]*)[^\n]*\n(.*?)^[ \t]*\1[^\n]*$", re.S | re.M)
NOT_SHELL = {"python", "py", "yaml", "yml", "toml", "json"}
INLINE = re.compile(r"`([^`]+)`")
ITEM = re.compile(r"(?:[-*+]|\d+\.)\s|\|")  # a list item or a table row, not indented code
SEPARATORS = {"&&", "||", ";", "|", "&", "|&"}
REDIRECT = re.compile(r"\d*(?:>>?|<|&>)(&\d+)?(.*)")
ANGLED = re.compile(r"<[^>]+>")  # a placeholder such as <dir>, not a redirection
ENV_PREFIX = re.compile(r"[A-Za-z_]\w*=.*")
WRAPPERS = {"env", "time", "nohup", "exec", "$"}
LABELS = ("Reproduce it:",)  # the training summary's last line: "Reproduce it: evaluate-ppo-lstm ..."
INTERPRETER = re.compile(r"(?:\S*/)?python[\d.]*")
LAUNCHERS = {"torchrun", "torch.distributed.run"}  # they run the first .py script named after them
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(?::\d+)?|\$\w+|\$\{[^}]*\}|\$\([^)]*\)|<[^>]+>|\.\.\.")
CANDIDATES = ("1", "0.5", "2020-01-01", "1y", "auto", "x")  # tried in turn for a placeholder's value
TRAIN = "train-ppo-lstm"
PLOT_TRAINING = "python -m ppo_lstm.plot_training"
# `python -m` forms that make_flags does not name: the root script run as a module, and the training curves
EXTRA_MODULES = {"train_ppo_lstm": TRAIN, "ppo_lstm.plot_training": PLOT_TRAINING}


@dataclass
class Command:
    page: str  # relative to the repository root
    line: int
    program: str  # a make_flags title (e.g. "evaluate-ppo-lstm"), PLOT_TRAINING, or "bench/X.py"
    args: list[str]
    inline: bool  # shown in inline code (a name with a flag or two), not a block
    text: str = field(default="")  # the command as shown, from its program on

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@functools.lru_cache(maxsize=None)
def make_flags():
    return _load("make_flags", ROOT / "docs" / "make_flags.py")


@functools.lru_cache(maxsize=None)
def aliases() -> tuple[dict[str, str], dict[str, str]]:
    """(script basename -> command, ``python -m`` module -> command), read from make_flags'
    "run as" text; the console script's name is the command's title."""
    scripts, modules = {}, dict(EXTRA_MODULES)
    for title, _, runs_as, _ in make_flags().COMMANDS:
        for shown in INLINE.findall(runs_as):
            words = shown.split()
            if "-m" in words[:-1]:
                modules[words[words.index("-m") + 1]] = title
            elif words[-1].endswith(".py"):
                scripts[Path(words[-1]).name] = title
    return scripts, modules


def _program(words: list[str]) -> tuple[Optional[str], int]:
    """The program a simple command runs, and where its arguments start; (None, 0) if not ours."""
    scripts, modules = aliases()
    if not words:
        return None, 0
    if words[0] in {title for title, *_ in make_flags().COMMANDS}:  # a console script
        return words[0], 1
    if words[0].endswith(".py") and Path(words[0]).name in scripts:  # ./train_ppo_lstm.py, run as a program
        return scripts[Path(words[0]).name], 1
    launcher = words[0] in LAUNCHERS
    if INTERPRETER.fullmatch(words[0]):
        k = 1
        while k < len(words) and words[k].startswith("-") and words[k] != "-m":  # the interpreter's options
            k += 1
        if k == len(words):
            return None, 0
        if words[k] == "-m":
            module = words[k + 1] if k + 1 < len(words) else ""
            if module in modules:
                return modules[module], k + 2
            launcher = module in LAUNCHERS
        else:
            script = words[k].removeprefix("./")
            if re.fullmatch(r"bench/[\w.-]+\.py", script):
                return script, k + 1
            return (scripts[Path(script).name], k + 1) if Path(script).name in scripts else (None, 0)
    if launcher:  # torchrun [its flags] SCRIPT.py ..., python -m torch.distributed.run [its flags] SCRIPT.py ...
        for j, word in enumerate(words):
            if word.endswith(".py"):
                return (scripts[Path(word).name], j + 1) if Path(word).name in scripts else (None, 0)
    return None, 0


def _segments(tokens: list[str]) -> list[list[str]]:
    """The simple commands of a tokenised line: split at the shell's operators, redirections dropped."""
    segments: list[list[str]] = [[]]
    skip_target = False
    split: list[str] = []
    for token in tokens:  # `a.py;` is `a.py ;`
        split += [token[:-1], ";"] if token.endswith(";") and len(token) > 1 else [token]
    for token in split:
        if skip_target:
            skip_target = False
            continue
        if token in SEPARATORS:
            segments.append([])
            continue
        redirect = REDIRECT.fullmatch(token)
        if redirect and not ANGLED.match(token):
            skip_target = not redirect.group(1) and not redirect.group(2)
            continue
        segments[-1].append(token)
    return segments


def commands_in_line(line: str) -> list[tuple[str, list[str], str]]:
    """(program, arguments, shown text) of each of our commands in one (joined) line."""
    stripped = line.strip()
    for label in LABELS:
        stripped = stripped.removeprefix(label)
    try:
        tokens = shlex.split(stripped, comments=True)
    except ValueError as error:  # unbalanced quotes: a failure only if it is one of our commands
        tokens = stripped.split()
        found = [program for segment in _segments(tokens) if (program := _program(_unwrapped(segment))[0])]
        return [(program, ["<unparsable>"], f"{stripped} ({error})") for program in found]
    found = []
    for segment in _segments(tokens):
        words = _unwrapped(segment)
        program, start = _program(words)
        if program is not None:
            found.append((program, words[start:], " ".join(words)))
    return found


def _unwrapped(segment: list[str]) -> list[str]:
    k = 0
    while k < len(segment) and (segment[k] in WRAPPERS or ENV_PREFIX.fullmatch(segment[k])):
        k += 1
    return segment[k:]


def _blank(match: re.Match) -> str:
    return "\n" * match.group(0).count("\n")


def shown_commands(text: str, page: str = "page.md") -> list[Command]:
    """Every command of ours that a page's ``text`` shows, in fenced, indented and inline code."""
    found: list[Command] = []

    def add(piece: str, first_line: int, inline: bool) -> None:
        lines = piece.split("\n")
        k = 0
        while k < len(lines):
            start, logical = k, lines[k]
            while logical.endswith("\\") and k + 1 < len(lines):  # a line continuation
                k += 1
                logical = logical[:-1] + " " + lines[k].strip()
            for program, args, shown in commands_in_line(logical):
                if inline and " " not in shown:
                    continue  # a name in prose (`evaluate-ppo-lstm`, `train_ppo_lstm.py`), not a command
                found.append(Command(page, first_line + start, program, args, inline, shown))
            k += 1

    for match in FENCE.finditer(text):
        if match.group(2).lower() not in NOT_SHELL:
            add(match.group(3), text[:match.start(3)].count("\n") + 1, inline=False)
    rest = FENCE.sub(_blank, text)
    lines = rest.split("\n")
    block: list[str] = []
    for number, line in enumerate([*lines, ""], 1):  # indented code: runs of lines indented 4 spaces
        if line.startswith("    ") and not ITEM.match(line.lstrip()):
            block.append(line)
        elif block:
            add("\n".join(block), number - len(block), inline=False)
            block = []
    rest = "\n".join("" if line.startswith("    ") else line for line in lines)
    for match in INLINE.finditer(rest):
        add(match.group(1).replace("\n", " "), rest[:match.start()].count("\n") + 1, inline=True)
    return sorted(found, key=lambda c: c.line)


# ---- parsers ----

class _Captured(Exception):
    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser


def captured_parser(call: Callable[[], object], argv: Optional[list[str]] = None,
                    ) -> Optional[argparse.ArgumentParser]:
    """The parser that ``call`` builds, caught at its first ``parse_args``/``parse_known_args``:
    for commands that build their parser inside ``main()``. Nothing after that call runs (the
    patch raises there), so a benchmark's work never starts; the environment variables,
    ``sys.path`` and ``sys.argv`` a script sets on import are restored."""

    def capture(self, *args, **kwargs):
        raise _Captured(self)

    saved_env, saved_path, saved_argv = dict(os.environ), list(sys.path), list(sys.argv)
    try:
        with mock.patch.object(argparse.ArgumentParser, "parse_args", capture), \
                mock.patch.object(argparse.ArgumentParser, "parse_known_args", capture), \
                contextlib.redirect_stdout(io.StringIO()):
            if argv is not None:
                sys.argv[:] = argv
            call()
    except _Captured as caught:
        return caught.parser
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        sys.path[:], sys.argv[:] = saved_path, saved_argv
    return None


@functools.lru_cache(maxsize=None)
def bench_parser(script: str) -> Optional[argparse.ArgumentParser]:
    """A benchmark script's parser, from running the script as ``__main__`` up to its
    ``parse_args`` (:func:`captured_parser`). A script that builds no ``ArgumentParser`` is not
    run (it would run the benchmark): None, as for a script that takes no flags.

    Why this way: the scripts build their parsers inside ``main()`` (one at module level), with
    no builder to import, and they are left as they are. ``SCRIPT FLAGS --help`` proves nothing
    (argparse exits at ``--help`` before it reads the other flags), and a subprocess per script
    would import torch each time and make this an e2e test. Run in this process, a script stops
    at its first ``parse_args`` and only its imports have run."""
    path = ROOT / script
    if "ArgumentParser(" not in path.read_text(encoding="utf-8"):
        return None
    return captured_parser(lambda: runpy.run_path(str(path), run_name="__main__"), argv=[str(path)])


def parser_for(program: str) -> Optional[argparse.ArgumentParser]:
    """A fresh parser of one of our commands (a bench script's is shared: it is only read)."""
    if program.startswith("bench/"):
        return bench_parser(program)
    if program == PLOT_TRAINING:  # its parse_args builds the parser, then asks for --checkpoint-dir itself
        from ppo_lstm.evaluation import plot_training
        return captured_parser(lambda: plot_training.parse_args([]))
    for title, _, _, modules in make_flags().COMMANDS:
        if title == program:
            return make_flags()._parser_of(*modules)(program)  # every build_parser takes the prog
    raise KeyError(program)


def _action(parser: argparse.ArgumentParser, option: str) -> Optional[argparse.Action]:
    actions = parser._option_string_actions
    if option in actions:
        return actions[option]
    prefixed = [name for name in actions if name.startswith(option) and option.startswith("--")]
    return actions[prefixed[0]] if len(prefixed) == 1 else None


def _value_for(parser: argparse.ArgumentParser, action: argparse.Action, placeholder: str) -> str:
    """A value that ``action`` accepts in place of ``placeholder`` (the placeholder itself where it
    does: ``--data TRAIN`` is a path)."""
    first_choice = [str(next(iter(action.choices)))] if action.choices else []
    for candidate in (placeholder, *first_choice, *CANDIDATES):
        try:
            parser._check_value(action, parser._get_value(action, candidate))  # its type, then its choices
            return candidate
        except (argparse.ArgumentError, TypeError, ValueError):
            continue
    return placeholder


def filled(parser: argparse.ArgumentParser, args: list[str]) -> list[str]:
    """``args`` with usage brackets dropped and each placeholder replaced (see the module's text)."""
    out: list[str] = []
    current: Optional[argparse.Action] = None  # the option whose values follow
    for token in args:
        if token.startswith("[-"):
            token = token[1:]
        if token.endswith("]") and "[" not in token:
            token = token[:-1]
        if not token:
            continue
        if token.startswith("-") and not token.startswith("---") and len(token) > 1:
            option, eq, value = token.partition("=")
            current = _action(parser, option)
            if eq and current is not None and PLACEHOLDER.fullmatch(value):
                token = f"{option}={_value_for(parser, current, value)}"
                current = None
            elif eq or (current is not None and current.nargs == 0):
                current = None
            out.append(token)
            continue
        if PLACEHOLDER.fullmatch(token):
            if current is not None:
                token = _value_for(parser, current, token)
            elif token == "...":
                continue  # "more flags"
        if current is not None and current.nargs in (None, "?"):
            current = None
        out.append(token)
    return out


def refusal(command: Command) -> Optional[str]:
    """None if today's parser accepts ``command`` (or it asks for help), else why not."""
    if "<unparsable>" in command.args:
        return "the shell cannot split it (unbalanced quotes)"
    bench = command.program.startswith("bench/")
    if bench and not (ROOT / command.program).is_file():
        return f"no such script: {command.program}"
    try:
        parser = parser_for(command.program)
    except Exception as error:  # a script that cannot even be imported, say
        return f"{command.program}: its parser could not be built: {type(error).__name__}: {error}"
    if parser is None:
        return None if not command.args else f"{command.program} takes no flags (it builds no parser)"
    args = filled(parser, command.args)
    if "--config" in args or any(a.startswith("--config=") for a in args):
        # The file may give the required flags (e.g. `--config run.yaml` holding `checkpoint:`), as the
        # commands' own parse_args (ppo_lstm/config/flags.py) allows: only the required-ness is waived.
        parser = _waive_required(parser)
    if command.inline and not bench:
        # Inline code names a command with one of its flags (`predict-ppo-lstm --state`,
        # `evaluate-ppo-lstm --plot`): the flags must exist, but the rest of the command is not shown.
        # A benchmark's command in inline code (a README table cell) is whole, and checked whole.
        parser = _waive_required(parser)
        if args and args[-1].startswith("--") and "=" not in args[-1]:
            last = _action(parser, args[-1])
            if last is not None and last.nargs != 0:
                args = args[:-1]
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as stop:
        if stop.code in (0, None):
            return None
        lines = err.getvalue().strip().splitlines()
        return lines[-1] if lines else f"exit code {stop.code}"
    return None


def _waive_required(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """A copy of ``parser`` that requires no flag (a bench script's parser is cached and shared)."""
    parser = copy.deepcopy(parser)
    for action in parser._actions:
        action.required = False
    for group in parser._mutually_exclusive_groups:
        group.required = False
    return parser
