"""The demo's console: the terminal gets the story lines only; what a step's children print on
their own file descriptors (spark-submit, the JVM, librdkafka) lands in the step's log file,
and a failing step names its log."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = textwrap.dedent(
    """
    import subprocess, sys
    from pathlib import Path
    from tidemark_dev.console import Console

    console = Console(Path(sys.argv[1]))
    print("noise outside any step")
    console.say("story line one")
    with console.step("quiet", "a step"):
        subprocess.run(["sh", "-c", "echo child stdout; echo child stderr >&2"], check=True)
        print("python print inside the step")
    try:
        with console.step("boom", "a failing step"):
            raise RuntimeError("broken")
    except RuntimeError:
        console.say("caught")
    console.close()
    print("after close")
    """
)


def test_the_terminal_gets_the_story_and_the_logs_get_the_rest(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "logs")], capture_output=True, text=True, check=True
    )
    lines = done.stdout.splitlines()
    assert lines[0] == "story line one"
    assert lines[1].startswith("a step ... ") and lines[1].endswith(" s")
    assert lines[2].startswith("a failing step ... FAILED after") and "boom.log" in lines[2]
    assert lines[3:] == ["caught", "after close"]
    assert done.stderr == ""
    step_log = (tmp_path / "logs" / "quiet.log").read_text()
    assert "child stdout" in step_log and "child stderr" in step_log and "python print inside" in step_log
    assert "noise outside any step" in (tmp_path / "logs" / "demo.log").read_text()
