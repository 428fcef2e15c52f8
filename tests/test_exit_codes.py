"""README's exit-code tables and the code's agree: every status a command can exit with (its EXIT_CODES
table, which the command line returns from) appears in that command's README table, and the README
names no status the code does not have.

An exit-code table is a Markdown table whose header starts with `exit`; each further header cell names
(in backticks; `tileiras-async`'s subcommands by their own name, so that README's command-line test does
not take them for command lines) the commands that column describes; a status belongs to a command when its cell in that
column is not empty.  A row's first cell may give several statuses (`130 / 143 / 129`).
"""
from __future__ import annotations

import re
from pathlib import Path

from tileiras_async.cli.batch import exit_tables

README = Path(__file__).resolve().parents[1] / "README.md"


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def readme_exit_tables(text: str) -> dict[str, set[int]]:
    """command -> the statuses README's tables give it."""
    found: dict[str, set[int]] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("| exit |"):
            continue
        columns = [re.findall(r"`([^`]+)`", c) for c in _cells(line)[1:]]
        for row in lines[i + 2:]:
            if not row.startswith("|"):
                break
            first, *rest = _cells(row)
            codes = {int(c) for c in re.findall(r"\d+", first)}
            for commands, cell in zip(columns, rest):
                for command in commands:
                    found.setdefault(command, set())
                    if cell:
                        found[command] |= codes
    return found


def test_readme_lists_every_exit_status_of_every_command():
    readme = readme_exit_tables(README.read_text())
    code = {command: set(table) for command, table in exit_tables().items()}
    assert sorted(readme) == sorted(code), "commands with an exit-code table in README vs in the code"
    for command in code:
        assert readme[command] == code[command], command


def test_the_parser_reads_columns_and_multi_status_rows():
    text = ("| exit | `a`, `b` | `c` |\n| --- | --- | --- |\n| 1 | x | |\n| 130 / 143 | y | z |\n\nafter\n"
            "| exit | `d` |\n| --- | --- |\n| 7 | w |\n")
    assert readme_exit_tables(text) == {"a": {1, 130, 143}, "b": {1, 130, 143}, "c": {130, 143}, "d": {7}}


def test_what_the_commands_raise_is_in_their_tables():
    """The statuses the code carries elsewhere (error classes, the supervisor, the tools) are in the tables."""
    from tileiras_async.emu import errors as emu_errors
    from tileiras_async.engines import EnginesDisagree
    from tileiras_async.interp import errors as interp_errors
    from tileiras_async.interp.runner import InvalidModule
    from tileiras_async.pipeline import supervisor, tools
    from tileiras_async.pipeline.dask_pool import EXIT_CLUSTER
    tables = exit_tables()
    raised = {cls.exit_code for module in (emu_errors, interp_errors) for cls in vars(module).values()
              if isinstance(cls, type) and hasattr(cls, "exit_code")}
    raised |= {EnginesDisagree.exit_code, InvalidModule.exit_code}
    assert raised <= set(tables["run"])
    batch = {supervisor.EXIT_UNREADABLE, supervisor.EXIT_CONFIG, supervisor.EXIT_BAD_INPUT, supervisor.EXIT_INTERNAL,
             supervisor.EXIT_CODEGEN, supervisor.EXIT_CANCELLED, *supervisor.SIGNAL_EXIT.values(),
             tools.EXIT_TOOL_FAILED, tools.EXIT_TOOL_MISSING, EXIT_CLUSTER}
    assert batch == set(tables["compile"])

