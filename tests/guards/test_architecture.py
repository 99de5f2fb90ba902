"""The shape of the Python layer, kept by tests: short functions, no import cycles, one option spec.

* every function in ``mhfast/`` is at most 80 lines (docstring included);
* the import graph of ``mhfast`` (every ``import``, also those inside functions) has no cycle;
* ``mhfast sample --help`` and ``mhfast translate --help`` list every sampler option with the
  spec's default, and the two commands reject a bad value with the same message;
* ``docs/options.md`` holds the table generated from the spec.
"""
from __future__ import annotations

import ast
import contextlib
import io
from pathlib import Path

import pytest

from mhfast.cli import build_parser, main
from mhfast.sampler import options

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "mhfast"
MAX_FUNCTION_LINES = 80
# The sampler options the commands must offer (issue 10's list), whatever the spec says.
REQUIRED_FLAGS = ("--energy", "--sampler", "--chains", "--epochs", "--burn-in", "--order", "--proposal-temperature",
                  "--top-p", "--block-schedule", "--target-temperature", "--anneal", "--min-target-temperature",
                  "--force-accept-epochs", "--seed", "--device", "--backend", "--max-tokens-per-batch")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    for path in PACKAGE.glob("_C*.so"):  # the compiled extension: a module without imports of its own
        out["mhfast._C"] = path
    return out


def test_no_function_longer_than_80_lines():
    too_long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    too_long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    assert not too_long, "functions over 80 lines: " + ", ".join(too_long)


def import_graph() -> dict[str, set[str]]:
    """Module -> the mhfast modules it imports (``from P import name`` counts as P.name when that is a module)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        if path.suffix == ".so":
            continue
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for t in targets:
                while t and t not in modules:  # "import mhfast.sampler.rng as r" -> that module
                    t = t.rpartition(".")[0]
                if t and t != mod:
                    graph[mod].add(t)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` (as a path that returns to its start), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = visit(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m)
            if found:
                return found
    return None


def test_find_cycle_finds_a_cycle():  # the checker itself can fail
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycles():
    graph = import_graph()
    assert "mhfast.sampler.kernels.mh" in graph["mhfast.sampler.kernels"]  # the graph sees relative imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def _help(command: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    return out.getvalue()


@pytest.mark.parametrize("command", ["sample", "translate"])
def test_help_lists_every_sampler_option_with_the_spec_default(command):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    by_flag = {s: a for a in sub._actions for s in a.option_strings}
    text = _help(command)
    flags = [o.flag for o in options.SPEC if o.cli]
    assert set(REQUIRED_FLAGS) <= set(flags)
    for opt in (o for o in options.SPEC if o.cli):
        assert opt.flag in text, f"mhfast {command} --help does not list {opt.flag}"
        assert by_flag[opt.flag].default == opt.default, (command, opt.flag)


@pytest.mark.parametrize("flag,value,message", [
    ("--chains", "0", "--chains must be an int >= 1, got 0"),
    ("--top-p", "1.5", "--top-p must be in (0, 1], got 1.5"),
    ("--anneal", "-1", "--anneal must be a finite number >= 0, got -1.0"),
    ("--seed", str(2 ** 63), f"--seed must be an int in [{-2 ** 63}, {2 ** 63 - 1}], got {2 ** 63}"),
])
def test_both_commands_reject_a_bad_value_with_the_same_message(flag, value, message, capsys, tmp_path):
    messages = []
    for command in ("sample", "translate"):
        extra = ["--length", "3"] if command == "sample" else ["--input", str(tmp_path / "none.txt")]
        code = main([command, flag, value, *extra])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        messages.append(err.split("error: ", 1)[1].strip())
    assert messages == [message, message]


def test_docs_options_table_is_generated_from_the_spec():
    text = (ROOT / "docs" / "options.md").read_text(encoding="utf-8")
    assert text == options.options_page(), "docs/options.md is stale: regenerate it (command in its first lines)"
