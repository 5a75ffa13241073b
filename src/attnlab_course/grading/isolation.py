"""What each sandboxed grading gets on the host besides its bubblewrap sandbox: a uid of its own and a cgroup.

* **A uid no one else uses** (:func:`lease_uid`, when the grader is root). A uid is taken only when no account or
  group has it (the passwd and group databases), no subordinate range of ``/etc/subuid`` or ``/etc/subgid`` holds
  it, no process runs as it, and no other grading holds it: each lease keeps an ``flock`` on a file in a root-only
  folder, so concurrent gradings, of this grader or of another one on the same host, never share a uid, whatever
  ``--jobs`` is. Killing every process of a leased uid is therefore safe.
* **A cgroup of its own** (:func:`make_cgroup`) with aggregate limits for everything the submission starts: memory
  (tmpfs pages and kernel memory such as inodes included), processes and CPU. cgroup v2 (``memory.max``,
  ``pids.max``, ``cpu.max``, under ``<cgroup2>/attnlab-check``) and cgroup v1 (``memory.limit_in_bytes``,
  ``pids.max``, ``cpu.cfs_quota_us``, under the grader's own cgroup of each hierarchy) are both used, each
  controller wherever the host has it. When the grading ends, every process in its cgroup is killed and the cgroup
  removed. Where no cgroup can be made (not root, no such controller, ``ATTNLAB_CHECK_NO_CGROUP`` set), the gradings
  keep the per-process limits of :class:`.sandbox.Limits` and :func:`cgroup_unavailable_reason` says why.
"""

from __future__ import annotations

import os
import secrets
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

UID_BASE = 1_900_000_000  # above the usual account, subordinate (100000+) and container ranges; checked anyway
UID_SPAN = 1_000_000
CONTROLLERS = ("memory", "pids", "cpu")
NO_CGROUP_ENV = "ATTNLAB_CHECK_NO_CGROUP"
_V2_PARENT = "attnlab-check"


# --- uids ------------------------------------------------------------------------------------------------------------


@dataclass
class UidLease:
    """A uid held for one grading; ``release`` once no process of it is left."""

    uid: int
    fd: int | None

    def release(self) -> None:
        with _lock:
            _leased.discard(self.uid)
            if self.fd is not None:
                os.close(self.fd)  # drops the flock
                self.fd = None


_lock = threading.Lock()
_leased: set[int] = set()


def _lock_dir() -> Path | None:
    """A folder only root can write, for the lease files (None when no safe one can be had)."""
    for base in (Path("/run"), Path(tempfile.gettempdir())):
        folder = base / "attnlab-check-uids"
        try:
            folder.mkdir(mode=0o700, exist_ok=True)
            info = os.lstat(folder)
        except OSError:
            continue
        if os.path.isdir(folder) and not os.path.islink(folder) and info.st_uid == 0 and not info.st_mode & 0o022:
            return folder
    return None


def _subordinate_ranges() -> list[range]:
    ranges = []
    for path in ("/etc/subuid", "/etc/subgid"):
        try:
            lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.strip().split(":")
            if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                ranges.append(range(int(parts[1]), int(parts[1]) + int(parts[2])))
    return ranges


def process_uids() -> set[int]:
    """The real, effective, saved and filesystem uids of every process this host shows."""
    uids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for line in (proc / "status").read_text().splitlines():
                if line.startswith("Uid:"):
                    uids.update(int(u) for u in line.split()[1:])
                    break
        except (OSError, ValueError):
            continue
    return uids


def _has_account(uid: int) -> bool:
    import grp
    import pwd

    for lookup in (pwd.getpwuid, grp.getgrgid):  # the sandbox runs with gid == uid
        try:
            lookup(uid)
            return True
        except KeyError:
            pass
    return False


def lease_uid(base: int = UID_BASE, span: int = UID_SPAN) -> UidLease:
    """A uid that no account, group, subordinate range, process or other grading uses (root only)."""
    busy = process_uids()
    subordinate = _subordinate_ranges()
    folder = _lock_dir()
    with _lock:
        for uid in range(base, base + span):
            if uid in _leased or uid in busy or any(uid in r for r in subordinate) or _has_account(uid):
                continue
            fd = None
            if folder is not None:
                import fcntl

                fd = os.open(folder / f"uid-{uid}", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:  # another grading holds it
                    os.close(fd)
                    continue
            _leased.add(uid)
            return UidLease(uid, fd)
    raise RuntimeError(f"no free uid in {base}..{base + span - 1}")


def _zombie(proc: Path) -> bool:
    """Whether the process has ended and only waits for its parent to collect its exit status."""
    return (proc / "stat").read_text().rpartition(")")[2].split()[:1] == ["Z"]


def kill_uid(uid: int) -> int:
    """SIGKILL every live process of ``uid`` (only ever a leased uid: no one else runs as it); the number killed.

    A zombie is not counted: it runs nothing and holds nothing but its pid. The sandbox's bubblewrap, orphaned when
    its parent is killed, is one until init collects it, which takes over a second on some hosts. (A uid that a
    zombie still shows is not leased again meanwhile: :func:`lease_uid` skips it.)"""
    killed = 0
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and proc.stat().st_uid == uid and not _zombie(proc):
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
        except OSError:
            pass
    return killed


# --- cgroups ---------------------------------------------------------------------------------------------------------


class CgroupUnavailable(RuntimeError):
    """No cgroup can be made here; the message says why."""


def _mounts() -> tuple[Path | None, dict[str, Path]]:
    """The cgroup2 mount point, and the cgroup v1 mount point of each controller of CONTROLLERS."""
    v2, v1 = None, {}
    for line in Path("/proc/self/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        if fields[2] == "cgroup2" and v2 is None:
            v2 = Path(fields[1])
        elif fields[2] == "cgroup":
            for option in fields[3].split(","):
                if option in CONTROLLERS:
                    v1.setdefault(option, Path(fields[1]))
    return v2, v1


def _own_paths() -> dict[str, str]:
    """This process's cgroup in each v1 controller ("memory" -> "/a/b"), and in v2 under the key ""."""
    paths = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            paths[""] = path
        for controller in controllers.split(","):
            paths.setdefault(controller, path)
    return paths


def _write(path: Path, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


@dataclass
class Cgroup:
    """One grading's cgroup: a folder per hierarchy that holds one of its controllers."""

    folders: list[Path]
    version: str  # "v2", "v1" or "v1+v2"

    @property
    def procs_files(self) -> list[str]:
        """The files a process writes its pid into to join (every folder's ``cgroup.procs``)."""
        return [str(folder / "cgroup.procs") for folder in self.folders]

    def pids(self) -> set[int]:
        found = set()
        for folder in self.folders:
            try:
                found.update(int(p) for p in (folder / "cgroup.procs").read_text().split())
            except (OSError, ValueError):
                pass
        return found

    def kill(self, seconds: float = 5.0) -> bool:
        """SIGKILL every process in the cgroup, those forked meanwhile too; True when none is left."""
        give_up = time.monotonic() + seconds
        for folder in self.folders:
            if (folder / "cgroup.kill").exists():  # v2, Linux 5.14+: the kernel kills them all at once
                try:
                    _write(folder / "cgroup.kill", "1")
                except OSError:
                    pass
        while True:
            left = self.pids()
            if not left:
                return True
            if time.monotonic() > give_up:
                return False
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.02)

    def remove(self) -> None:
        for folder in self.folders:
            for _ in range(50):  # a killed process may take a moment to leave
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.02)


def _words(path: Path) -> list[str]:
    try:
        return path.read_text().split()
    except FileNotFoundError:
        return []


def _v2_parent(v2: Path, wanted: list[str]) -> Path:
    """``<cgroup2>/attnlab-check``, with ``wanted`` enabled for its children (it holds no process itself, so cgroup
    v2's rule that only leaves hold processes is kept)."""
    enabled = _words(v2 / "cgroup.subtree_control")
    if not set(wanted) <= set(enabled):
        _write(v2 / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted if c not in enabled))
    parent = v2 / _V2_PARENT
    parent.mkdir(mode=0o755, exist_ok=True)
    if not set(wanted) <= set(_words(parent / "cgroup.subtree_control")):
        _write(parent / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
    return parent


def _v2_limits(folder: Path, limits, controllers: list[str]) -> None:
    if "memory" in controllers:
        _write(folder / "memory.max", str(limits.memory_total))
        if (folder / "memory.swap.max").exists():
            _write(folder / "memory.swap.max", "0")
    if "pids" in controllers:
        _write(folder / "pids.max", str(limits.processes))
    if "cpu" in controllers:
        _write(folder / "cpu.max", f"{int(limits.cpus * 100_000)} 100000")


def _v1_limits(folder: Path, limits, controller: str) -> None:
    if controller == "memory":
        _write(folder / "memory.limit_in_bytes", str(limits.memory_total))
        if (folder / "memory.memsw.limit_in_bytes").exists():  # memory plus swap: no swapping out of the limit
            _write(folder / "memory.memsw.limit_in_bytes", str(limits.memory_total))
    elif controller == "pids":
        _write(folder / "pids.max", str(limits.processes))
    elif controller == "cpu":
        _write(folder / "cpu.cfs_period_us", "100000")
        _write(folder / "cpu.cfs_quota_us", str(int(limits.cpus * 100_000)))


def make_cgroup(limits, *, root: Path | None = None) -> Cgroup:
    """A new cgroup with ``limits`` (memory_total, processes, cpus) for one grading, or CgroupUnavailable.

    ``root`` replaces ``/`` for the cgroup file systems (the tests' fake hierarchies).
    """
    reason = _forced_off()
    if reason:
        raise CgroupUnavailable(reason)
    if root is None and os.geteuid() != 0:
        raise CgroupUnavailable("the grader is not root")
    v2, v1 = _mounts() if root is None else (root / "unified" if (root / "unified").exists() else None,
                                             {c: root / c for c in CONTROLLERS if (root / c).exists()})
    own = _own_paths() if root is None else {}
    on_v2 = []
    if v2 is not None and (v2 / "cgroup.controllers").exists():
        on_v2 = [c for c in CONTROLLERS if c in (v2 / "cgroup.controllers").read_text().split()]
    missing = [c for c in CONTROLLERS if c not in on_v2 and c not in v1]
    if missing:
        raise CgroupUnavailable(f"no cgroup controller {', '.join(missing)} on this host")
    name = f"attnlab-{os.getpid()}-{secrets.token_hex(4)}"
    made: list[Path] = []
    try:
        if on_v2:
            folder = _v2_parent(v2, on_v2) / name
            folder.mkdir(mode=0o755)
            made.append(folder)
            _v2_limits(folder, limits, on_v2)
        for controller in CONTROLLERS:
            if controller in on_v2:
                continue
            parent = v1[controller] / own.get(controller, "/").lstrip("/")
            if not parent.is_dir():  # a container that shows its own cgroup as the root of the mount
                parent = v1[controller]
            folder = parent / name
            if folder not in made:
                folder.mkdir(mode=0o755)
                made.append(folder)
            _v1_limits(folder, limits, controller)
    except OSError as exc:
        Cgroup(made, "").remove()
        raise CgroupUnavailable(f"cannot make a cgroup ({exc.strerror or exc})") from None
    version = "v2" if on_v2 and len(on_v2) == len(CONTROLLERS) else ("v1" if not on_v2 else "v1+v2")
    return Cgroup(made, version)


def _forced_off() -> str | None:
    if os.environ.get(NO_CGROUP_ENV):
        return f"turned off by {NO_CGROUP_ENV}"
    return None


@lru_cache(maxsize=None)
def _probe() -> tuple[str | None, str]:
    try:
        cgroup = make_cgroup(_ProbeLimits())
    except CgroupUnavailable as exc:
        return str(exc), ""
    except OSError as exc:
        return f"cannot read the cgroup file systems ({exc.strerror})", ""
    cgroup.remove()
    return None, cgroup.version


class _ProbeLimits:
    memory_total, processes, cpus = 2**30, 64, 1.0


def cgroup_unavailable_reason() -> str | None:
    """Why gradings get no cgroup here (None when they do)."""
    return _forced_off() or _probe()[0]


def cgroup_version() -> str:
    """Which cgroups the gradings get: "v2", "v1", "v1+v2", or "" when none."""
    return "" if cgroup_unavailable_reason() else _probe()[1]


# --- one grading -----------------------------------------------------------------------------------------------------


@dataclass
class HostGrading:
    """What one sandboxed nbval run holds on the host: its leased uid (root) and its cgroup (where one can be made)."""

    lease: UidLease | None = None
    cgroup: Cgroup | None = None

    @property
    def uid(self) -> int | None:
        return self.lease.uid if self.lease else None

    def end(self) -> None:
        """Kill whatever the submission left running (its cgroup, then its uid), then give the uid back."""
        clean = True
        if self.cgroup is not None:
            clean = self.cgroup.kill()
            self.cgroup.remove()
            self.cgroup = None
        if self.lease is not None:
            for _ in range(100):
                if not kill_uid(self.lease.uid):
                    break
                time.sleep(0.02)
            else:
                clean = False
            if clean:
                self.lease.release()  # else kept: a uid with a process left is never handed out again
            self.lease = None


def start_grading(use_sandbox: bool, limits) -> HostGrading:
    """The uid and cgroup of a new sandboxed run (none of them without the sandbox, or without root)."""
    host = HostGrading()
    if not use_sandbox or os.geteuid() != 0:
        return host
    host.lease = lease_uid()
    if cgroup_unavailable_reason() is None:
        try:
            host.cgroup = make_cgroup(limits)
        except CgroupUnavailable:  # the per-process limits still hold
            host.cgroup = None
    return host
