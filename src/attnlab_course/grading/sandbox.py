"""One OS sandbox per submission: the learner's kernel runs inside bubblewrap (Linux).

What the kernel sees (:func:`bwrap_args`): a read-only view of the system libraries, the Python installation, the
virtual environment and the ``attnlab`` package, never the course tooling (``attnlab_course``, the grader and any
shipped solutions: :func:`hidden_paths`); a private ``/tmp`` and working folder (small tmpfs); its own PID, network
(loopback only, nothing listening), IPC, UTS and user namespaces; uid 1000, not root; no environment but a few
variables; and one writable runtime folder of its own (mode 0700), which holds its connection file and sockets. It
dies with its parent (``--die-with-parent``), and everything it starts dies with it (its PID namespace).

Limits (:class:`Limits`) are set with ``setrlimit`` before bubblewrap starts: address space (memory), processes,
open files, file size and CPU time. When the grader runs as root, the sandbox also runs as an unprivileged uid of its
own outside (root is exempt from the process limit; the uid is leased by :mod:`.isolation`): this launcher, still
root, joins the grading's cgroup (aggregate memory, processes and CPU), makes the paths the kernel needs reachable
for that uid with bind mounts in a private mount namespace, gives the kernel one scratch tmpfs with a size and an
inode limit for its ``/tmp``, home and ``/dev/shm``, then drops to that uid and starts bubblewrap. Without root, each
of those three is a tmpfs of bubblewrap with a size limit only.

The grader's trusted pytest process of a grading run as root first enters a mount namespace of its own
(:func:`enter_private_runtime`), where the sandbox's runtime folder becomes a tmpfs with a size and an inode limit,
mode 0700 and owned by the sandbox's uid, so that neither the host disk nor other users see it.

    python -I -S sandbox.py CONFIG.json -- COMMAND...     # the kernel command nbval runs
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
    tmp_size: int = 256 * 2**20  # bytes of the private tmpfs (as root: one for /tmp, home and /dev/shm together)
    inodes: int = 10_000  # files and folders of each private tmpfs (as root)
    runtime_size: int = 32 * 2**20  # bytes of the runtime folder, a tmpfs (as root)
    memory_total: int = 4 * 2**30  # bytes of memory of the whole sandbox, tmpfs and kernel memory included (cgroup)
    cpus: float = 1.0  # CPUs the whole sandbox may keep busy (cgroup)


@dataclass
class Config:
    """Everything the launcher needs, written as JSON by the grader (never seen by the kernel)."""

    runtime: str  # the kernel's own writable folder on the host
    read_only: list[str] = field(default_factory=list)  # host paths shown at the same place, read-only
    hidden: list[str] = field(default_factory=list)  # paths inside those, replaced by an empty folder
    env: dict[str, str] = field(default_factory=dict)
    uid: int | None = None  # outside uid to run as (only when the grader is root)
    limits: Limits = field(default_factory=Limits)
    cgroup_procs: list[str] = field(default_factory=list)  # the grading's cgroup: files to write our pid into
    runtime_seed: str = ""  # with --private-runtime: what to copy into the runtime tmpfs

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
    return list(_python_paths())


@lru_cache(maxsize=1)
def _python_paths() -> tuple[str, ...]:
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
    return tuple(p for p in kept if not any(p != q and p.startswith(q.rstrip("/") + "/") for q in kept))


def hidden_paths(read_only: list[str]) -> list[str]:
    """The course tooling and the debugger, hidden from the kernel wherever they lie inside a folder it sees: each is
    replaced by an empty folder.

    Installed from the ``attnlab-course`` wheel, the package ``attnlab_course`` (the grader, and the solution
    notebooks the wheel ships) sits in site-packages beside ``attnlab``, and the kernel sees site-packages. Run from
    a checkout, it sits in ``src/``, of which the kernel sees only ``attnlab``: there is nothing to hide.

    ``debugpy``, which ipykernel imports at start when it can, to serve a debugger no grading uses: a quarter of the
    kernel's start (0.25 s of CPU in every grading), and code that attaches to processes. Without it ipykernel starts
    without its debugger, as it does wherever debugpy is not installed.
    """
    import importlib.util

    from attnlab_course import paths

    packages = [paths.PACKAGE]
    spec = importlib.util.find_spec("debugpy")  # found, not imported
    if spec is not None and spec.submodule_search_locations:
        packages.append(Path(list(spec.submodule_search_locations)[0]).resolve())
    return [str(package) for package in packages
            if any(package.is_relative_to(Path(p).resolve()) for p in read_only)]


def bwrap_args(config: Config, sources: dict[str, str] | None = None, scratch: str | None = None) -> list[str]:
    """The bubblewrap command line; ``sources`` maps a path to where the launcher staged it, and ``scratch`` is
    the launcher's tmpfs with folders tmp, home and shm (root only)."""
    sources = sources or {}
    limits = config.limits

    def private(path: str, part: str) -> list[str]:
        return ["--bind", f"{scratch}/{part}", path] if scratch else ["--size", str(limits.tmp_size), "--tmpfs", path]

    args = [bwrap_path() or "bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--uid", str(INSIDE_UID), "--gid", str(INSIDE_UID), "--hostname", "sandbox", *_system_binds(),
            *private("/tmp", "tmp")]  # first: read-only folders may live under /tmp
    for path in config.read_only:
        args += ["--ro-bind", sources.get(path, path), path]
    for path in config.hidden:
        if Path(path).exists():
            args += ["--tmpfs", path, "--remount-ro", path]
    args += ["--proc", "/proc", "--dev", "/dev", *private("/dev/shm", "shm"), *private(HOME, "home"),
             "--bind", sources.get(config.runtime, config.runtime), config.runtime,
             "--chdir", HOME, "--clearenv"]
    # as many BLAS and OpenMP threads as CPUs the sandbox may keep busy (its cgroup's quota): more only spin and
    # take the quota from the learner's own work; a grader's setting of these variables is passed on instead
    threads = str(max(1, int(config.limits.cpus)))
    env = {"HOME": HOME, "USER": "learner", "LOGNAME": "learner", "PATH": f"{sys.prefix}/bin:/usr/bin:/bin",
           "PYTHONNOUSERSITE": "1", "OPENBLAS_NUM_THREADS": threads, "OMP_NUM_THREADS": threads,
           "MKL_NUM_THREADS": threads, **{k: os.environ[k] for k in _PASS_ENV if k in os.environ}, **config.env}
    for key, value in env.items():
        args += ["--setenv", key, value]
    return args


def _matplotlib_cache() -> Path:
    """matplotlib's cache folder, found as matplotlib finds it (``get_cachedir``: $MPLCONFIGDIR, else the XDG cache
    folder) without importing matplotlib, which takes the grader a good part of a second."""
    if "matplotlib" in sys.modules:
        return Path(sys.modules["matplotlib"].get_cachedir())
    if os.environ.get("MPLCONFIGDIR"):
        return Path(os.environ["MPLCONFIGDIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "matplotlib"


def runtime_dir(tmp: Path, uid: int | None) -> tuple[Path, Path]:
    """The kernel's own folder (connection file, sockets, IPython profile, matplotlib's font cache), private to the
    grading (mode 0700), and the folder its first contents are written to. Without root they are the same folder;
    as root the runtime folder is a tmpfs of the grading's own mount namespace (see :func:`private_runtime`)
    and the contents are copied into it from ``seed``."""
    runtime = seed = tmp / "run"
    runtime.mkdir(mode=0o700)
    if uid is not None:
        seed = tmp / "seed"
    profile = seed / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.InlineBackend.figure_formats = set()\nc.HistoryManager.enabled = False\n")
    mpl = seed / "mpl"
    mpl.mkdir()
    try:
        for cache in _matplotlib_cache().glob("fontlist-*.json"):
            shutil.copy(cache, mpl / cache.name)  # no font scan in every kernel
    except Exception:  # no matplotlib, or no cache yet: the kernel builds its own
        pass
    os.chmod(seed, 0o700)
    return runtime, seed



# --- the launcher ---------------------------------------------------------------------------------------------------

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_BIND, _MS_REC, _MS_PRIVATE = 2, 4, 4096, 16384, 1 << 18


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


def _mount_tmpfs(libc, target: Path, size: int, inodes: int, uid: int, mode: str = "0700") -> None:
    options = f"size={size},nr_inodes={inodes},mode={mode},uid={uid},gid={uid}".encode()
    _check(libc.mount(b"tmpfs", str(target).encode(), b"tmpfs", _MS_NOSUID | _MS_NODEV, options), f"tmpfs {target}")


def scratch_for_uid(config: Config, uid: int) -> str:
    """As root, in the launcher's mount namespace: one tmpfs for the kernel's /tmp, home and /dev/shm, with a size
    and an inode limit (bubblewrap's own tmpfs has no inode limit), owned by ``uid``."""
    libc = _libc()
    scratch = Path(config.runtime).parent / "stage" / "scratch"
    scratch.mkdir(mode=0o700, exist_ok=True)
    _mount_tmpfs(libc, scratch, config.limits.tmp_size, config.limits.inodes, uid)
    for part in ("tmp", "home", "shm"):
        (scratch / part).mkdir(mode=0o1777 if part != "home" else 0o700)
        os.chmod(scratch / part, 0o1777 if part != "home" else 0o700)
        os.chown(scratch / part, uid, uid)
    return str(scratch)


def join_cgroup(config: Config) -> None:
    """Move this process (and so everything it starts) into the grading's cgroup."""
    for procs in config.cgroup_procs:
        fd = os.open(procs, os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)


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
    sources, scratch = {}, None
    uid = os.getuid()
    join_cgroup(config)
    if os.geteuid() == 0 and config.uid is not None:
        sources = stage_for_uid(config)
        uid = config.uid
        scratch = scratch_for_uid(config, uid)
    args = bwrap_args(config, sources, scratch) + ["--", *command]  # while the grader's own paths can be seen
    _set_limits(config.limits, uid)
    if uid != os.getuid():
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    os.execv(args[0], args)


def enter_private_runtime(config: Config) -> None:
    """As root, in the grader's pytest process (single-threaded, before it starts anything): a mount namespace of
    its own, where the runtime folder is a tmpfs with a size and an inode limit, mode 0700, owned by the sandbox's
    uid and filled from ``runtime_seed``."""
    libc = _libc()
    _check(libc.unshare(_CLONE_NEWNS), "unshare")
    _check(libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    uid = config.uid if config.uid is not None else os.getuid()
    _mount_tmpfs(libc, Path(config.runtime), config.limits.runtime_size, config.limits.inodes, uid)
    if config.runtime_seed:
        shutil.copytree(config.runtime_seed, config.runtime, dirs_exist_ok=True, symlinks=True)
        for path in [Path(config.runtime), *Path(config.runtime).rglob("*")]:
            os.lchown(path, uid, uid)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I -S sandbox.py CONFIG.json -- COMMAND...", file=sys.stderr)
        return 2
    launch(Config.read(argv[0]), argv[2:])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
