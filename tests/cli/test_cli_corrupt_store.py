"""A store whose file was damaged (pages in the middle overwritten, the header intact): every command says so
in one line naming the file, exit code 2, and writes nothing; no command shows the data left as if nothing
were wrong. Checked once per process (`PRAGMA quick_check`), again when the file changed."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import app
from orchestrator.state.store import Store, StoreCorrupt
from tests.support.text import lines

ROOT = Path(__file__).resolve().parents[2]
PAGE = 4096


def damage(path: Path, begin: float = 1 / 3, end: float = 2 / 3) -> None:
    """Overwrite the file's pages from `begin` to `end` (fractions of the file; never page 1, the header)
    with a fixed pattern, keeping its size."""
    pages = path.stat().st_size // PAGE
    first, last = max(1, int(pages * begin)), max(2, int(pages * end))
    with open(path, "r+b") as handle:
        handle.seek(first * PAGE)
        handle.write(b"\x55" * ((last - first) * PAGE))


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A store of two hosts and 40 leases, made once: each test damages a copy of it."""
    path = tmp_path_factory.mktemp("template") / "state.sqlite"
    for name in ("lab1", "lab2"):
        assert CliRunner().invoke(app, ["host", "add", name, "--uri", "test:///default", "--cpus", "8", "--memory",
                                        "16384", "--state", str(path)]).exit_code == 0
    for _ in range(40):
        assert CliRunner().invoke(app, ["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h",
                                        "--name", "x" * 200, "--state", str(path)]).exit_code == 0
    assert not Path(str(path) + "-wal").exists()   # checkpointed: all the data is in the file
    assert path.stat().st_size >= 12 * PAGE
    return path


@pytest.fixture
def filled(template, store_path, cli):
    shutil.copyfile(template, store_path)
    store_path.chmod(0o600)
    return cli


@pytest.fixture
def damaged(filled, store_path):
    damage(store_path)
    return filled


COMMANDS = [
    ["lease", "list"],
    ["lease", "list", "--json"],
    ["lease", "show", "3"],
    ["lease", "submit", "--cpus", "1", "--memory", "1024", "--duration", "1h"],
    ["lease", "cancel", "2"],
    ["lease", "extend", "2", "--by", "1h"],
    ["host", "list"],
    ["host", "add", "lab9", "--uri", "test:///default", "--cpus", "2", "--memory", "1024"],
    ["host", "drain", "lab1"],
    ["image", "list"],
    ["plan"],
    ["report"],
    ["run", "--dry-run"],
    ["run", "--fast", "--until-idle"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_every_command_refuses_a_damaged_store_in_one_line(damaged, store_path, args):
    before = store_path.read_bytes()
    result = damaged(*args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    [line] = lines(result.stderr)
    assert line.startswith(f"error: {store_path}: the state database is damaged (SQLite quick_check: ")
    assert store_path.read_bytes() == before


def test_a_command_in_its_own_process_says_the_same(damaged, store_path):
    done = subprocess.run([sys.executable, "-c", "from orchestrator.cli import main; main()", "host", "list",
                           "--state", str(store_path)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2
    assert done.stdout == ""
    [line] = lines(done.stderr)
    assert line.startswith(f"error: {store_path}: the state database is damaged")


CHECK_IN_NEW_PROCESS = """
import sys
from orchestrator.state.store import Store, StoreCorrupt
try:
    Store.open(sys.argv[1]).close()
except StoreCorrupt:
    print("damaged")
else:
    print("intact")
"""


def opened_elsewhere(path: Path) -> str:
    done = subprocess.run([sys.executable, "-c", CHECK_IN_NEW_PROCESS, str(path)], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_check_runs_once_per_process_and_again_when_the_file_changes(filled, store_path):
    """A process that opens the store many times checks it at the first open only: damage that keeps the
    file's size and time (to the last pages: lease data, which opening does not read) goes unnoticed by it,
    while a new process sees it. Once the file's time changes, it is checked again."""
    Store.open(store_path).close()                       # checked (and found intact) in this process
    stat = store_path.stat()
    damage(store_path, 0.75, 1.0)
    os.utime(store_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    Store.open(store_path).close()                       # not checked again: the same file, as far as it can tell
    assert opened_elsewhere(store_path) == "damaged"
    os.utime(store_path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    with pytest.raises(StoreCorrupt, match="damaged"):
        Store.open(store_path)


def test_a_connection_opened_as_checked_does_not_read_every_page_again(filled, store_path):
    """The server's read connections (`checked=True`) are opened beside its writer, which checked the file
    as the server started and has changed it since: they are not checked again (a check reads every page
    while the request that opens one waits). Any other open of the changed file is."""
    Store.open(store_path).close()
    damage(store_path, 0.75, 1.0)   # (changes the file's time, as the writer's commits do)
    Store.open(store_path, checked=True).close()
    with pytest.raises(StoreCorrupt, match="damaged"):
        Store.open(store_path)
