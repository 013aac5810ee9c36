"""Members of a foreign system on the real backends (process, netns, docker): the same placement, network faults,
member faults, histories and checks as chaosbed's own members; only how a member starts, becomes ready, leaves and
ends a run differs (docs/scenario-format.md "Foreign members", docs/foreign.md).

- start: the system's command with its placeholders filled (orchestration/systems/launch.py), the contract's config
  file, CHAOSBED_* in the environment (the token there and in the config, never on the command line), in a session
  of its own; on docker in the system's image, or in chaosbed's member image with the working directory mounted.
- ready: it answers `ping` (with control), or its history has the incarnation's `start` line (without); a member
  that exits first, or is not ready in time, fails `up` with the tail of its own output.
- kill, pause, resume: the member's process group (a wrapper script's children with it); leave: the control
  command `leave` where the system has it (`leave = "control"`: a graceful leave of the group, then `left`, `stop`
  and exit), else, or when the member does not take it, SIGTERM (the history contract's `stop`, then it exits);
  restart: a new incarnation appending to the same history, and no `incarnation`
  command to the others (not in the control contract: a foreign system learns restarted peers itself).
- end of a run: orchestration/systems/quiet.py.
- a system with a `process_ip` (the JGroups jar) gets it on the process backend with a port each (claimed like the
  process backend's subnets) and one multicast port for the group; a system with stacks of its own gets the chosen
  one as the config's `stack`; a system's `mounts` are bound read-only into chaosbed's image on docker (the host's
  JDK and jar); and the system is prepared (built) before its first member starts.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Mapping
from functools import cached_property
from pathlib import Path

from node import jsonl
from orchestration.backends.docker import DockerCluster, member_pid
from orchestration.backends.netns import NetnsCluster
from orchestration.backends.process import ProcessCluster
from orchestration.backends.real import RealCluster
from orchestration.cluster import Cluster, ClusterError, ControlReply, MemberInfo, ViewInfo
from orchestration.host import claims
from orchestration.host.member_python import member_env
from orchestration.host.processes import send_signal
from orchestration.systems import System, prepare, system_of
from orchestration.systems.launch import Launch
from orchestration.systems.quiet import HistoryQuiet, history_start, quiet_verdict, same_views

OUTPUT_TAIL = 2000  # characters of a member's own output in an error
CONTRACT_COMMANDS = ("ping", "send", "multicast", "tasks", "view", "stats", "flush", "shutdown", "leave")
CHAOSBED_ONLY_COMMANDS = ("close", "set", "incarnation")


class ForeignMembers(RealCluster):
    """The foreign-member behaviour, placed after a backend's class in the MRO (foreign_class)."""

    @cached_property
    def system(self) -> System:
        return system_of(self.spec.system)

    @cached_property
    def _history_quiet(self) -> HistoryQuiet:
        return HistoryQuiet(self.system.settle)

    def start(self, timeout: float = 30.0) -> Cluster:
        try:
            prepare(self.system)
        except RuntimeError as e:
            raise ClusterError(f"system {self.system.name!r} cannot start: {e}") from None
        self._ready_timeout = timeout
        return super().start(timeout)  # type: ignore[misc]

    def _spawn_all(self, members: list[MemberInfo]) -> None:
        """All at once, or one by one (each ready before the next) for a system that says `one_by_one`."""
        if not self.system.one_by_one:
            super()._spawn_all(members)
            return
        for m in members:
            self._spawn(m)
            self.wait_ready(m.name, getattr(self, "_ready_timeout", 30.0))

    def _launch(self, m: MemberInfo) -> Launch:
        peers = {n: (o.ip, o.port) for n, o in self.members.items()}
        group = getattr(self, "_group", None) or "239.255.77.1"
        mcast_port = getattr(self, "_mcast_port", None)
        return Launch(m.name, m.ip, m.port, m.incarnation, m.history, m.config, self.label, group, peers, mcast_port)

    def _write_config(self, m: MemberInfo) -> None:
        m.history = str(self.workdir / "history" / f"{m.name}.jsonl")
        m.config = str(self.state_dir / f"{m.name}.{m.incarnation}.json")
        doc = self._launch(m).config_doc(self.token, self.spec.transport, self.system.name)
        if self.system.stacks:
            doc["stack"] = self.spec.stack
        doc.update(self.system.member_config)
        fd = os.open(m.config, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)  # it holds the token
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f, indent=1)
        self._history_offsets[m.name] = Path(m.history).stat().st_size if Path(m.history).exists() else 0

    @cached_property
    def _history_offsets(self) -> dict[str, int]:
        """Per member, the size of its history when its current incarnation started (its `start` comes after)."""
        return {}

    def _command(self, m: MemberInfo) -> list[str]:
        return self._launch(m).argv(self.system.command)

    def _member_env(self, m: MemberInfo) -> dict[str, str]:
        return {**member_env(), **self._launch(m).env(self.token)}

    def _signal(self, pid: int, sig: int) -> bool:
        return send_signal(pid, self.label, sig, group=True)

    def _announce_incarnation(self, name: str) -> None:
        """Nothing: `incarnation` is chaosbed's own command, not the control contract's."""

    def leave(self, name: str) -> None:
        """The member leaves: by the control command `leave` where the system has it (it leaves the group, writes
        `left` and `stop`, and exits), else by SIGTERM (it writes `stop` and exits; to a group that is a crash). A
        member that refuses `leave` or does not answer it gets SIGTERM. It is no longer counted as running from now
        on."""
        m = self.members[name]
        if name not in self.running() or m.pid is None:
            raise ClusterError(f"member {name} is not running")
        if m.paused:
            self.resume(name)
        if not (self.system.leave == "control" and self._control_leave(name)):
            self._terminate(m)
        self._leaving.add(name)

    def sigterm(self, name: str) -> None:
        """SIGTERM to the member, whatever its leave (the end of a run's signal; `chaosbed conform` tries it)."""
        m = self.members[name]
        if name not in self.running() or m.pid is None:
            raise ClusterError(f"member {name} is not running")
        if m.paused:
            self.resume(name)
        self._terminate(m)
        self._leaving.add(name)

    def _control_leave(self, name: str) -> bool:
        """Asks the member to leave; False when it refuses or does not answer (then SIGTERM)."""
        try:
            return bool(self.control(name, "leave", timeout=5.0).get("ok"))
        except (ClusterError, OSError):
            return False

    def _terminate(self, m: MemberInfo) -> None:
        self._signal(m.pid, signal.SIGTERM)  # type: ignore[arg-type]

    def control(self, name: str, cmd: str, *, timeout: float = 10.0, **args: object) -> ControlReply:
        """A request of the control contract; chaosbed's own commands (close, set, incarnation) are never sent to a
        foreign member, and `leave` (optional in the contract) only to a system that has it."""
        if not self.system.control:
            raise ClusterError(f"member {name}: system {self.system.name!r} has no control (control = false)")
        if cmd in CHAOSBED_ONLY_COMMANDS or (cmd == "leave" and self.system.leave != "control"):
            raise ClusterError(
                f"member {name}: {cmd!r} is chaosbed's own command, not the control contract's (system "
                f"{self.system.name!r}: {', '.join(CONTRACT_COMMANDS)})"
            )
        try:
            return super().control(name, cmd, timeout=timeout, **args)
        except (jsonl.BadReply, TimeoutError) as e:
            raise ClusterError(f"member {name} (system {self.system.name!r}): {e}") from None

    def views(self) -> dict[str, ViewInfo | None]:
        """Each running, not paused member's view (None: it has none); {} without control."""
        if not self.system.control:
            return {}
        out: dict[str, ViewInfo | None] = {}
        for name in self.running():
            if self.members[name].paused:
                continue
            reply = self.control(name, "view")
            view = reply.get("view", False)
            if view is not None and not isinstance(view, dict):
                raise ClusterError(
                    f'member {name}: its `view` reply breaks the control contract: it needs "view" (null or '
                    f'{{"view_id", "members", "merge"}}), not {reply!r:.200}'
                )
            out[name] = view
        return out

    def has_views(self) -> bool:
        """Whether the system has views: it says so (`views = true`), or a member answers `view` with one already."""
        return self.system.views or any(v is not None for v in self.views().values())

    # --- readiness ------------------------------------------------------------------------------------------------

    def wait_ready(self, name: str, timeout: float) -> None:
        m = self.members[name]
        deadline = time.monotonic() + timeout
        while True:
            ended = self._exit_report(m)
            if ended is not None:
                raise ClusterError(f"member {name} (system {self.system.name!r}) {ended}")
            if self._ready(m):
                self._after_ready(m)
                return
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)  # polling a condition with a deadline
        what = "did not answer `ping` on its control port" if self.system.control else "wrote no `start` line"
        raise ClusterError(
            f"member {name} (system {self.system.name!r}) {what} within {timeout:g}s; "
            f"its output ends with:\n{self._output_tail(m)}"
        )

    def _ready(self, m: MemberInfo) -> bool:
        if not self.system.control:
            return history_start(Path(m.history), self._history_offsets.get(m.name, 0), m.incarnation)
        try:
            return bool(self.control(m.name, "ping", timeout=1.0).get("ok"))
        except (OSError, ClusterError):
            return False

    def _after_ready(self, m: MemberInfo) -> None:
        pass

    def _exit_report(self, m: MemberInfo) -> str | None:
        """None while the member runs; else how it ended, with its output."""
        proc = self._procs.get(m.name)
        if proc is None or proc.poll() is None:
            return None
        return f"exited with {proc.returncode} at start; its output ends with:\n{self._output_tail(m)}"

    def _output_tail(self, m: MemberInfo) -> str:
        log = self.state_dir / f"{m.name}.{m.incarnation}.log"
        try:
            text = log.read_text(errors="replace")[-OUTPUT_TAIL:]
        except OSError:
            return "(no output)"
        return text or "(no output)"

    # --- the end of a run (orchestration/schedule.py asks these) ---------------------------------------------------

    def quiet(self) -> bool | None:
        """One look at whether the members are done (systems/quiet.py); None: they report `waiting_on`, so
        chaosbed's own rule decides."""
        up = self.running()
        running = [n for n in up if not self.members[n].paused]
        histories = [Path(m.history) for m in self.members.values()]
        return quiet_verdict(self, running, histories, self._history_quiet, up)

    def only_a_tail_owed(self) -> bool:
        """The last look found the members done but for a multicast tail owed to one of them (systems/quiet.py): at
        the deadline the run is over, and the checker reports the tail."""
        return self._history_quiet.only_a_tail_owed

    def views_agree(self) -> bool:
        return same_views(self.views(), self.running())


class ForeignProcess(ProcessCluster, ForeignMembers):
    """On loopback; a system with a `process_ip` binds every member to it, each with a port of its own, and gives
    the group one multicast port (loopback_ports)."""

    def _place(self, names: list[str]) -> None:
        if not self.system.process_ip:
            super()._place(names)
            return
        index = claims.claim(self.label, "loopback", LOOPBACK_BLOCKS, self.state_dir)
        self._group = f"239.79.{index // 250}.{index % 250}"  # the loopback blocks of loopback_ports
        ports, mcast_port = loopback_ports(index, len(names))
        self._mcast_port: int | None = mcast_port
        for name, port in zip(names, ports, strict=True):
            self.members[name] = MemberInfo(name, self.system.process_ip, port)

    def _network_state(self) -> dict[str, object]:
        return {**super()._network_state(), "mcast_port": getattr(self, "_mcast_port", None)}

    def _restore_network(self, network: Mapping[str, object]) -> None:
        super()._restore_network(network)
        port = network.get("mcast_port")
        self._mcast_port = port if isinstance(port, int) and not isinstance(port, bool) else None


LOOPBACK_BASE = 20_000  # below Linux's ephemeral ports (32768-60999)
LOOPBACK_BLOCK = 60  # 26 members x (data, control) and the multicast port
LOOPBACK_BLOCKS = 200


def loopback_ports(index: int, members: int) -> tuple[list[int], int]:
    """Block `index` of the loopback port space (claims kind "loopback"): each member's data port (its control
    endpoint is the next one) and the group's multicast port."""
    if not 0 <= index < LOOPBACK_BLOCKS or not 0 < members <= 26:
        raise ValueError(f"loopback block {index} of {LOOPBACK_BLOCKS}, {members} members (at most 26)")
    base = LOOPBACK_BASE + LOOPBACK_BLOCK * index
    return [base + 2 * i for i in range(members)], base + LOOPBACK_BLOCK - 1


class ForeignNetns(NetnsCluster, ForeignMembers):
    pass


class ForeignDocker(DockerCluster, ForeignMembers):
    """A foreign member's container: the system's image (else chaosbed's member image with the working directory
    mounted at the same path), its command, the contract's environment."""

    wait_ready = ForeignMembers.wait_ready  # DockerCluster's pings a chaosbed member

    def _spawn_all(self, members: list[MemberInfo]) -> None:
        if self.system.one_by_one:
            ForeignMembers._spawn_all(self, members)
        else:
            DockerCluster._spawn_all(self, members)

    def _member_run(self, m: MemberInfo) -> dict[str, object]:
        run = super()._member_run(m)
        argv = self._launch(m).argv(self.system.command)  # not _command: no `ip netns exec` in a container
        run.update(entrypoint=argv[:1], command=argv[1:], environment=self._launch(m).env(self.token))
        if self.system.image:
            run["image"] = self.system.image
        else:
            cwd = os.getcwd()
            volumes = run["volumes"]
            assert isinstance(volumes, dict)  # DockerCluster._member_run's mounts
            for folder in (cwd, *self.system.mounts):
                volumes.setdefault(folder, {"bind": folder, "mode": "ro"})
            run["working_dir"] = cwd
        return run

    def _terminate(self, m: MemberInfo) -> None:
        container = self._member_container(m)
        if container is not None:
            container.kill("SIGTERM")

    def _after_ready(self, m: MemberInfo) -> None:
        m.pid = member_pid(m.pid) if m.pid is not None else None

    def _exit_report(self, m: MemberInfo) -> str | None:
        container = self._member_container(m)
        if container is None or container.status != "exited":
            return None
        return f"exited with {container.attrs['State'].get('ExitCode')} at start; its output ends with:\n" + (
            self._output_tail(m)
        )

    def _output_tail(self, m: MemberInfo) -> str:
        container = self._member_container(m)
        if container is None:
            return "(no container)"
        return container.logs(tail=40).decode(errors="replace")[-OUTPUT_TAIL:] or "(no output)"


FOREIGN_CLASSES: dict[str, type[RealCluster]] = {
    "process": ForeignProcess,
    "netns": ForeignNetns,
    "docker": ForeignDocker,
}


def foreign_class(backend: str) -> type[RealCluster]:
    """The cluster class for a foreign system's members on `backend` (ClusterError where it cannot run)."""
    try:
        return FOREIGN_CLASSES[backend]
    except KeyError:
        raise ClusterError(
            f"a foreign system runs on the {', '.join(FOREIGN_CLASSES)} backends, not {backend} (the simulator runs "
            "chaosbed's own protocols only)"
        ) from None
