"""One OS sandbox per submission: the learner's kernel runs inside bubblewrap (Linux).

What the kernel sees (:func:`bwrap_args`): a read-only view of the system libraries, the Python installation, the
virtual environment and the ``attnlab`` package with its course tooling (``attnlab/course``: the grader and any
shipped solutions) hidden; a private ``/tmp`` and working folder (small tmpfs); its own PID, network (loopback only,
nothing listening), IPC, UTS and user namespaces; uid 1000, not root; no environment but a few variables; and one
writable folder of its own on the host, which holds its connection file and sockets. It dies with its parent
(``--die-with-parent``), and everything it starts dies with it (its PID namespace).

Limits (:class:`Limits`) are set with ``setrlimit`` before bubblewrap starts: address space (memory), processes,
open files, file size and CPU time. When the grader runs as root, the sandbox also runs as an unprivileged uid of its
own outside (root is exempt from the process limit): this launcher, still root, makes the paths the kernel needs
reachable for that uid with bind mounts in a private mount namespace, then drops to it and starts bubblewrap.

    python -m attnlab.course.grading.sandbox CONFIG.json -- COMMAND...    # the kernel command nbval runs
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path

INSIDE_UID = 1000
HOME = "/home/learner"
INSTALL_HINT = ("install bubblewrap: apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora); "
                "or pass --no-sandbox to grade trusted work without it")
_PASS_ENV = ("LANG", "LC_ALL", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
             "MKL_NUM_THREADS", "TZ")


@dataclass
class Limits:
    memory: int = 4 * 2**30  # bytes of address space per process
    processes: int = 256  # processes and threads, beyond those its uid already has
    open_files: int = 1024
    file_size: int = 64 * 2**20  # bytes, largest file it may write
    cpu_seconds: int = 300  # per process
    tmp_size: int = 256 * 2**20  # bytes of each private tmpfs


@dataclass
class Config:
    """Everything the launcher needs, written as JSON by the grader (never seen by the kernel)."""

    runtime: str  # the kernel's own writable folder on the host
    read_only: list[str] = field(default_factory=list)  # host paths shown at the same place, read-only
    hidden: list[str] = field(default_factory=list)  # paths inside those, replaced by an empty folder
    env: dict[str, str] = field(default_factory=dict)
    uid: int | None = None  # outside uid to run as (only when the grader is root)
    limits: Limits = field(default_factory=Limits)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self)), encoding="utf-8")

    @classmethod
    def read(cls, path) -> Config:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        data["limits"] = Limits(**data.get("limits", {}))
        return cls(**data)


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


@lru_cache(maxsize=1)
def unavailable_reason() -> str | None:
    """Why no sandbox can be made here (None when bubblewrap works: Linux, installed, user namespaces allowed)."""
    if not sys.platform.startswith("linux"):
        return f"bubblewrap sandboxes need Linux (this is {sys.platform})"
    if bwrap_path() is None:
        return "bubblewrap (bwrap) is not installed"
    probe = [bwrap_path(), "--unshare-all", "--die-with-parent", *_system_binds(), "--proc", "/proc", "--dev", "/dev",
             "--", "/bin/true" if Path("/bin/true").exists() else "/usr/bin/true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap does not run here ({exc})"
    if done.returncode != 0:
        return f"bubblewrap cannot make a sandbox here: {done.stderr.strip().splitlines()[-1] if done.stderr else ''}"
    return None


def _system_binds() -> list[str]:
    """/usr read-only, and /bin, /lib, ... as the host has them (symlinks into /usr, or folders)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/") / name
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for etc in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime"):
        args += ["--ro-bind-try", etc, etc]
    return args


def python_paths() -> list[str]:
    """The folders this Python needs: its installation, its virtual environment, and attnlab's source folder."""
    import attnlab

    paths = {sys.base_prefix, sys.base_exec_prefix, sys.prefix, sys.exec_prefix,
             sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"],
             str(Path(attnlab.__file__).resolve().parent)}
    executable = Path(sys.executable)
    paths.add(str(executable.resolve().parent.parent))  # where the venv's python symlink really points
    prefix = Path(sys.prefix).resolve()
    inside = {p for p in sys.path if p and Path(p).resolve().is_relative_to(prefix)}  # .pth folders of the venv too
    for folder in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *inside}:
        # packages linked into the environment from elsewhere (a venv made of symlinks)
        try:
            entries = list(Path(folder).iterdir()) if Path(folder).is_dir() else []
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink() and entry.exists():
                paths.add(str(entry.resolve().parent))
    # drop paths inside another one
    kept = sorted(p for p in paths if Path(p).exists())
    return [p for p in kept if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in kept)]


def hidden_paths() -> list[str]:
    """The course tooling (grader, authoring, shipped solutions): nothing the kernel needs, hidden from it."""
    import attnlab

    return [str(Path(attnlab.__file__).resolve().parent / "course")]


def bwrap_args(config: Config, sources: dict[str, str] | None = None) -> list[str]:
    """The bubblewrap command line; ``sources`` maps a path to where the launcher staged it (root only)."""
    sources = sources or {}
    limits = config.limits
    args = [bwrap_path() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox", *_system_binds(),
            "--size", str(limits.tmp_size), "--tmpfs", "/tmp"]  # first: read-only folders may live under /tmp
    for path in config.read_only:
        args += ["--ro-bind", sources.get(path, path), path]
    for path in config.hidden:
        if Path(path).exists():
            args += ["--tmpfs", path, "--remount-ro", path]
    args += ["--proc", "/proc", "--dev", "/dev",
             "--size", str(limits.tmp_size), "--tmpfs", "/dev/shm",
             "--size", str(limits.tmp_size), "--tmpfs", HOME,
             "--bind", sources.get(config.runtime, config.runtime), config.runtime,
             "--chdir", HOME, "--clearenv"]
    env = {"HOME": HOME, "USER": "learner", "LOGNAME": "learner", "PATH": f"{sys.prefix}/bin:/usr/bin:/bin",
           "PYTHONNOUSERSITE": "1", **{k: os.environ[k] for k in _PASS_ENV if k in os.environ}, **config.env}
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


# --- the launcher ---------------------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_BIND, _MS_REC, _MS_PRIVATE = 4096, 16384, 1 << 18


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    return libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def stage_for_uid(config: Config) -> dict[str, str]:
    """As root: bind every read-only path under the runtime folder, in a private mount namespace, so that the
    unprivileged uid can reach it whatever the permissions of its parents (e.g. a Python under /root)."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    stage = Path(config.runtime).parent / "stage"
    stage.mkdir(mode=0o755, exist_ok=True)
    sources = {}
    for i, path in enumerate(config.read_only):
        target = stage / str(i)
        target.mkdir(mode=0o755, exist_ok=True)
        _check(libc.mount(path.encode(), str(target).encode(), None, _MS_BIND | _MS_REC, None), f"bind {path}")
        sources[path] = str(target)
    return sources


def _set_limits(limits: Limits, uid: int) -> None:
    running = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _owner(p) == uid)
    for name, value in ((resource.RLIMIT_AS, limits.memory), (resource.RLIMIT_NOFILE, limits.open_files),
                        (resource.RLIMIT_FSIZE, limits.file_size), (resource.RLIMIT_CPU, limits.cpu_seconds),
                        (resource.RLIMIT_CORE, 0), (resource.RLIMIT_NPROC, running + limits.processes)):
        soft, hard = resource.getrlimit(name)
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(name, (value, value))


def _owner(proc: Path) -> int | None:
    try:
        return proc.stat().st_uid
    except OSError:
        return None


def launch(config: Config, command: list[str]) -> None:
    """Replace this process with bubblewrap running ``command`` (see the module docstring)."""
    sources = {}
    uid = os.getuid()
    if os.geteuid() == 0 and config.uid is not None:
        sources = stage_for_uid(config)
        uid = config.uid
    args = bwrap_args(config, sources) + ["--", *command]  # while the grader's own paths can still be seen
    _set_limits(config.limits, uid)
    if uid != os.getuid():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.execv(args[0], args)


def kill_uid(uid: int) -> int:
    """As root: SIGKILL every process of ``uid`` (a sandbox's own uid); the number killed."""
    import signal

    killed = 0
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and _owner(proc) == uid:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
                killed += 1
            except OSError:
                pass
    return killed


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -m attnlab.course.grading.sandbox CONFIG.json -- COMMAND...", file=sys.stderr)
        return 2
    launch(Config.read(argv[0]), argv[2:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
