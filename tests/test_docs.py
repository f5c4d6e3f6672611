"""The README and docs/ stay true to the command line, and the README stays a newcomer's guide.

- every `leasewise ...` command shown in a code block (or an inline code span) of the README, docs/ or
  benchmarks/RESULTS.md names a real command of the typer app, with options that command has;
- every option of every command is documented in docs/commands.md, in that command's own section;
- every relative link points at a file that exists, and at a heading that exists in it;
- the README is at most 500 lines.

The commands are resolved by the app itself (`orchestrator.cli.load()` and typer's click group), so a
renamed command or option fails here, not in a reader's terminal. Placeholders stay readable: `[--json]`,
`--status live|queued|...`, `ID[/N]`, `7/1`, `.../vmlinuz`, `migration|suspend`, `leasewise COMMAND`, and
anything after `--`.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from orchestrator.cli import load

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
COMMANDS_DOC = ROOT / "docs" / "commands.md"
DOCUMENTS = [README, *sorted((ROOT / "docs").glob("*.md")), ROOT / "benchmarks" / "RESULTS.md"]
README_MAX_LINES = 500

_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)
_INLINE = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(r"\]\(([^)\s]+)\)")
_SEPARATORS = {"&&", "||", "|", ";"}


@dataclass(frozen=True)
class Shown:
    """One `leasewise` command line as a document shows it."""

    document: str
    words: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.document}: leasewise {' '.join(self.words)}"


# -- finding the commands ----------------------------------------------------------------------------------
def _logical_lines(block: str) -> list[str]:
    """A code block's lines, with continuations (a trailing backslash, or an indented next line) joined."""
    lines: list[str] = []
    for raw in block.splitlines():
        if lines and (lines[-1].endswith("\\") or (raw[:1].isspace() and raw.strip())):
            lines[-1] = lines[-1].rstrip("\\").rstrip() + " " + raw.strip()
        else:
            lines.append(raw.rstrip())
    return lines


def _words(line: str) -> list[str]:
    """A shell line as words, without its comment; `$(` starts a command of its own."""
    line = line.removeprefix("$ ").replace("$(", " ; ")
    try:
        return shlex.split(line, comments=True)
    except ValueError:   # (an unbalanced quote in prose-like text: split plainly, comment cut off)
        return re.sub(r"(^|\s)#.*$", "", line).split()


def _leasewise_commands(words: list[str]) -> list[list[str]]:
    """The arguments of each simple command of `words` whose program is `leasewise`."""
    commands: list[list[str]] = []
    current: list[str] = []
    for word in [*words, ";"]:
        if word in _SEPARATORS:
            while current and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", current[0]):   # VAR=value cmd
                current.pop(0)
            if current and current[0] == "leasewise":
                commands.append([w.rstrip(")") for w in current[1:]])
            current = []
        else:
            current.append(word)
    return commands


def shown_commands(document: Path) -> list[Shown]:
    text = document.read_text()
    name = str(document.relative_to(ROOT))
    found: list[Shown] = []
    for block in _FENCE.findall(text):
        for line in _logical_lines(block):
            found += [Shown(name, tuple(args)) for args in _leasewise_commands(_words(line))]
    prose = _FENCE.sub("", text)
    for span in _INLINE.findall(prose):
        if span.startswith("leasewise "):
            found += [Shown(name, tuple(args)) for args in _leasewise_commands(_words(span))]
    return found


# -- resolving them in the app -----------------------------------------------------------------------------
def _root():
    return typer.main.get_command(load())


def _context(command, name: str):
    return command.context_class(command, info_name=name, resilient_parsing=True)


def _option_names(command) -> set[str]:
    return {name for p in command.params if p.param_type_name == "option" for name in (*p.opts, *p.secondary_opts)}


def _placeholder_free(words: tuple[str, ...]) -> list[str]:
    """The words with brackets dropped (`[--json]` -> `--json`) and ellipses left out."""
    cleaned = [w.replace("[", "").replace("]", "") for w in words]
    return [w for w in cleaned if w and "..." not in w]


def problems_of(words: tuple[str, ...]) -> list[str]:
    """What is wrong with `leasewise WORDS` as a command line of the app: [] when every command and option
    it names exists."""
    return _problems(_root(), "leasewise", _placeholder_free(words), [])


def _problems(node, name: str, words: list[str], chain: list) -> list[str]:
    chain = [*chain, node]
    ctx = _context(node, name)
    if hasattr(node, "commands"):   # a group: the next word that is not an option names a subcommand
        options = [w for w in _until_command(words)]
        problems = _unknown_options(options, chain, ctx)
        rest = words[len(options):]
        if not rest or re.fullmatch(r"[A-Z][A-Z_]*", rest[0]):   # (`leasewise COMMAND --help`: any command)
            return problems
        alternatives = rest[0].split("|") if all(a in node.commands for a in rest[0].split("|")) else [rest[0]]
        for alternative in alternatives:
            sub_name, sub, remaining = node.resolve_command(ctx, [alternative, *rest[1:]])
            if sub is None:
                problems.append(f"no command {' '.join([c.name for c in chain[1:]] + [alternative])!r}")
            else:
                problems += _problems(sub, sub_name, list(remaining), chain)
        return problems
    return _unknown_options(words, chain, ctx)


def _until_command(words: list[str]) -> list[str]:
    taken = []
    for word in words:
        if not word.startswith("-") or word == "--":
            break
        taken.append(word)
    return taken


def _unknown_options(words: list[str], chain: list, ctx) -> list[str]:
    known = set(ctx.help_option_names).union(*(_option_names(c) for c in chain))
    where = " ".join(c.name for c in chain[1:]) or "leasewise"
    problems = []
    for word in words:
        if word == "--":   # (what follows runs elsewhere: `lease ssh 7 -- hostname`)
            break
        for option in word.split("|"):
            option = option.split("=", 1)[0]
            if re.fullmatch(r"--?[A-Za-z][\w-]*", option) and option not in known:
                problems.append(f"{where}: no option {option}")
    return problems


# -- the tests ---------------------------------------------------------------------------------------------
SHOWN = [shown for document in DOCUMENTS for shown in shown_commands(document)]


def test_the_documents_show_commands():
    readme = [s for s in SHOWN if s.document == "README.md"]
    assert len(readme) >= 40, "the README's tour should show the main commands"
    assert {s.document for s in SHOWN} >= {"README.md", "docs/commands.md", "docs/service.md"}


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_every_command_shown_exists_with_its_options(shown):
    assert problems_of(shown.words) == [], str(shown)


@pytest.mark.parametrize("line, expected", [
    ("leasewise lease submit --nodes 4 --cpus 2 [--json]", []),
    ("leasewise lease list [--status live|queued|...] [--user alice]", []),
    ("leasewise lease ssh 7/1 [-i KEY] [-o OPT] -- hostname --not-ours", []),
    ("leasewise lease submit [--preemptible|--no-preemptible] [--ssh-key FILE]...", []),
    ("leasewise calibrate migration|suspend --host lab1", []),
    ("leasewise sweep examples/sweeps/small.toml --out small-results --resume", []),
    ("leasewise lease submitt --nodes 2", ["no command 'lease submitt'"]),
    ("leasewise lease submit --nodez 2", ["lease submit: no option --nodez"]),
    ("leasewise calibrate migration|suspend --sizez 1", ["calibrate migration: no option --sizez",
                                                        "calibrate suspend: no option --sizez"]),
    ("leasewise sweep plot r --x a --y b --hue=c --huee d", ["sweep plot: no option --huee"]),
])
def test_the_check_catches_what_is_wrong_and_reads_placeholders(line, expected):
    (args,) = _leasewise_commands(_words(line))
    assert problems_of(tuple(args)) == expected


def test_commands_are_found_in_shell_lines():
    words = _words('TOKEN=$(leasewise token create --note "a b") && deploy/lab/lab up # leasewise run')
    assert _leasewise_commands(words) == [["token", "create", "--note", "a b"]]
    assert _leasewise_commands(_words("journalctl -u leasewise -f")) == []


# -- every option documented -------------------------------------------------------------------------------
def _leaves(node, path: tuple[str, ...] = ()):
    if hasattr(node, "commands"):
        for name, sub in node.commands.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, node


def _section(doc: str, path: tuple[str, ...]) -> str | None:
    """The text under the heading `` `leasewise PATH` `` up to the next heading of its level or above."""
    heading = re.search(rf"^(#+) `leasewise {re.escape(' '.join(path))}`\s*$", doc, re.M)
    if heading is None:
        return None
    level = len(heading.group(1))
    end = re.compile(rf"^#{{1,{level}}} ", re.M).search(doc, heading.end())
    return doc[heading.end():end.start() if end else len(doc)]


def _mentions(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


LEAVES = list(_leaves(_root()))


def _shared_options() -> set[str]:
    """Options more than half the commands take (--state, --config, ...): documented once, in Conventions."""
    counts: dict[str, int] = {}
    for _, command in LEAVES:
        for option in _option_names(command):
            counts[option] = counts.get(option, 0) + 1
    return {option for option, n in counts.items() if n > len(LEAVES) / 2}


@pytest.mark.parametrize("path, command", LEAVES, ids=[" ".join(p) for p, _ in LEAVES])
def test_every_option_is_documented_in_its_commands_section(path, command):
    doc = COMMANDS_DOC.read_text()
    section = _section(doc, path)
    assert section is not None, f"docs/commands.md has no heading `leasewise {' '.join(path)}`"
    shared = _shared_options()
    missing = [o for o in sorted(_option_names(command)) if o.startswith("--")
               and not _mentions(section, o) and not (o in shared and _mentions(doc, o))]
    assert missing == [], f"leasewise {' '.join(path)}: options missing from its section of docs/commands.md"


def test_options_of_the_groups_are_documented():
    doc = COMMANDS_DOC.read_text()
    groups = [_root()]
    groups += [c for c in groups[0].commands.values() if hasattr(c, "commands")]
    missing = [o for g in groups for o in sorted(_option_names(g)) if o.startswith("--") and not _mentions(doc, o)]
    assert missing == []


# -- links, and the README's size --------------------------------------------------------------------------
def _anchors(text: str) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    headings = re.findall(r"^#+ (.+?)\s*$", _FENCE.sub("", text), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files_and_headings_that_exist(document):
    broken = []
    for target in _LINK.findall(_FENCE.sub("", document.read_text())):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(target)
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file.read_text()):
            broken.append(target)
    assert broken == []


def test_the_readme_stays_a_guide_of_at_most_500_lines():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines: move reference material to docs/"
