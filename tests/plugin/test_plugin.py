"""The chaosbed pytest plugin as users meet it: their test files run by pytest (with -n 2) in a subprocess."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path

import pytest

from orchestration.backends.netns import list_namespaces
from orchestration.pytest_plugin.teardown import processes_naming
from tests.plugin.conftest import BACKENDS, CASES, EXAMPLE, Inner, service_pid

pytestmark = pytest.mark.slow


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_example_passes_under_xdist(inner: Inner, backend: str) -> None:
    """docs/examples/test_my_cluster.py, the README's example, as a user runs it; the warm Spark service that was
    running before the run still runs after it (the session did not start it, so it does not stop it)."""
    before = service_pid(inner.state)
    out = inner.run({"test_my_cluster.py": EXAMPLE}, "-n", "2", f"--chaosbed-backend={backend}")
    assert out.ret == 0, out.output
    assert re.search(r"\b2 passed\b", out.output), out.output
    assert service_pid(inner.state) == before is not None


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_flawed_variant_fails_with_its_violation(inner: Inner, backend: str) -> None:
    """UNICAST2 without resend_first_msg (JGRP-1563): the test fails with one line per violation naming check,
    sender, receiver and seqno, the run folder, and the command that replays it; the fixed variant passes."""
    case = {"test_first_after_reset.py": CASES / "first_after_reset.py"}
    out = inner.run(case, "-n", "2", f"--chaosbed-backend={backend}")
    assert out.ret == 1, out.output
    assert re.search(r"\b1 failed, 1 passed\b", out.output), out.output
    block = [line for line in out.block("test_flawed") if not line.startswith("[gw")]
    assert block[0] == f"chaosbed: 1 violation(s) in the histories of 2 members (unicast2, udp) on {backend}:", block
    assert re.fullmatch(
        r"  delivered_within: sender=A receiver=B seqno=1 kind=unicast conn_id=\d+ msg_id=A>B#51: "
        r"B delivered it \d+\.\d+ s after it was sent at \d+\.\d+ s \(bound 2 s\)",
        block[1],
    ), block
    folder = re.fullmatch(r"run folder: (\S+) \(verdict\.json; .*\)", block[2])
    assert folder, block
    assert block[3] == f"replay: pytest test_first_after_reset.py::test_flawed --chaosbed-backend={backend}", block
    verdict = json.loads((Path(folder[1]) / "verdict.json").read_text())
    assert [(v["check"], v["sender"], v["receiver"], v["seqno"]) for v in verdict["violations"]] == [
        ("delivered_within", "A", "B", 1)
    ]
    faults = [json.loads(line) for line in (Path(folder[1]) / "faults.jsonl").read_text().splitlines()]
    kinds = [f.get("kind", f["event"]) for f in faults]
    assert kinds == ["start", "discard", "close-connection", "close-connection"], faults
    if backend == "sim":  # the simulator replays the case exactly: the replay command fails the same way
        replay = inner.run({}, *block[3].removeprefix("replay: pytest ").split())
        assert replay.ret == 1, replay.output
        assert [line for line in replay.block("test_flawed") if line.startswith("  ")] == [block[1]]


@pytest.mark.sim
def test_choices_skips_and_bad_arguments(inner_cold: Inner) -> None:
    """The marker's backend wins over --chaosbed-backend; skips say why (docker, netns without root); a bad marker
    argument or backend name is an error of that test, with the reason."""
    out = inner_cold.run({"test_choices.py": CASES / "choices.py"}, "--chaosbed-backend=process")
    summary = out.output.splitlines()[-1]
    assert "2 passed, 2 skipped, 3 errors" in summary, out.output
    assert re.search(r"SKIPPED \[1\] test_choices.py:\d+: docker: ", out.output), out.output
    assert re.search(r"SKIPPED \[1\] test_choices.py:\d+: netns: the netns backend needs root", out.output)
    assert "cluster.members: must be 1..26" in "\n".join(out.block("ERROR at setup of test_bad_members"))
    assert "unknown argument(s) size" in "\n".join(out.block("ERROR at setup of test_unknown_argument"))
    assert "unknown chaosbed backend 'nope'" in "\n".join(out.block("ERROR at setup of test_unknown_backend"))


def assert_nothing_left(facts: dict) -> None:
    label = facts["label"]
    assert not [ns for ns in list_namespaces() if ns.startswith(f"{label}-")]
    assert not processes_naming(label)
    assert not Path(facts["state_dir"]).exists()
    for pid in facts["pids"]:
        assert not Path(f"/proc/{pid}").exists() or label.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("how", ["error", "interrupt"])
def test_teardown_leaves_nothing_when_the_body_fails(inner_cold: Inner, backend: str, how: str) -> None:
    """A test body that raises (or a Ctrl-C: KeyboardInterrupt) while its members stream: the cluster is taken
    down anyway, and no namespace, process or state of it remains."""
    facts = inner_cold.folder / "facts.json"
    xdist = ["-n", "2"] if how == "error" else []  # a KeyboardInterrupt in an xdist worker ends only that worker
    out = inner_cold.run(
        {"test_teardown.py": CASES / "teardown.py"},
        *xdist,
        CASE_HOW=how,
        CASE_BACKEND=backend if backend == "netns" else "process",
        CASE_FACTS=str(facts),
    )
    assert out.ret == (1 if how == "error" else 2), out.output
    assert ("the test body broke" if how == "error" else "KeyboardInterrupt") in out.output
    assert "left behind" not in out.output
    assert_nothing_left(json.loads(facts.read_text()))


@pytest.mark.sim
def test_something_left_fails_the_test(inner_cold: Inner) -> None:
    """Anything that carries the cluster's label after its teardown fails the test, naming it."""
    facts = inner_cold.folder / "facts.json"
    try:
        out = inner_cold.run({"test_leftover.py": CASES / "leftover.py"}, CASE_FACTS=str(facts))
        pid = int(facts.read_text())
        assert out.ret == 1, out.output
        assert "1 passed, 1 error" in out.output.splitlines()[-1], out.output
        block = "\n".join(out.block("ERROR at teardown of test_leaves_a_process"))
        assert re.search(rf"chaosbed: cluster cb[0-9a-f]{{6}} left behind: processes {pid} \(", block), block
    finally:
        if facts.exists():  # the sleeper, by its pid and its command line (pids are reused quickly here)
            pid = int(facts.read_text())
            with contextlib.suppress(OSError):
                if b"time.sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    os.kill(pid, signal.SIGKILL)


@pytest.mark.spark
@pytest.mark.sim
def test_session_stops_the_spark_service_it_started(inner_cold: Inner) -> None:
    """No service runs; the user's session (two xdist workers) starts one on its first check (CHAOSBED_SPARK=auto,
    set by the plugin) and its controller stops it at the end."""
    assert service_pid(inner_cold.state) is None
    test = inner_cold.folder / "case.py"
    test.write_text(
        "import pytest\n"
        "from analysis import spark_service\n\n"
        "@pytest.mark.chaosbed(members=2, stack='unicast3', backend='sim')\n"
        "def test_check(chaos_cluster, history_check):\n"
        "    chaos_cluster.control('A', 'send', to='B', count=10)\n"
        "    assert history_check(chaos_cluster).run_stats['deliveries'] == 10\n"
        "    assert spark_service.status() is not None\n"
    )
    out = inner_cold.run({"test_service.py": test}, "-n", "2")
    assert out.ret == 0, out.output
    assert service_pid(inner_cold.state) is None
    assert (inner_cold.state / "spark" / "server.log").exists()


def test_readme_shows_the_tested_example() -> None:
    """The README's example test file is docs/examples/test_my_cluster.py, character for character."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Your own chaos tests with pytest\n", 1)[1]
    block = section.split("```python\n", 1)[1].split("```\n", 1)[0]
    assert block == EXAMPLE.read_text()


@pytest.mark.spark
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_clean_unicast2_cluster_passes_history_check(inner: Inner, backend: str) -> None:
    """UNICAST2 with default properties: history_check does not wait for its 60 s STABLE round."""
    out = inner.run({"test_clean_unicast2.py": CASES / "clean_unicast2.py"}, f"--chaosbed-backend={backend}")
    assert out.ret == 0, out.output
    assert re.search(r"\b2 passed\b", out.output), out.output
