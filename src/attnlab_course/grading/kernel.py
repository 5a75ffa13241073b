"""The learner's kernel of one grading, started by the grading's pytest process (:mod:`.nbval_hooks` hands it to
nbval): in its sandbox when the grading asks for one (:mod:`.sandbox`), over Unix sockets in the sandbox's folder.

The first kernel is launched before pytest starts: the grading's pytest process (forked warm by :mod:`.warm`, or
started cold by :data:`.runner.PYTEST_MAIN`) calls :func:`start_early` first, so the kernel boots while pytest
configures itself and the hooks and while the runner still builds the notebook. This module imports only the
standard library until it launches; jupyter_client then. Later kernels (nbval's restart after a crash) are
launched by :func:`launch` when asked for.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

EARLY: dict | None = None  # {"km": the kernel launched by start_early} or {"error": why it could not be}
LAUNCHED: dict = {}  # "km": the kernel launched last (the one running), for the hooks' interrupt and kill


def manager(grading: dict, kernel_name: str):
    """The manager of the learner's kernel: nbval's, or, when the grading asks for a sandbox, the same kernel over
    Unix sockets inside the sandbox."""
    from jupyter_client.manager import KernelManager
    from nbval.kernel import NbvalKernelspecManager

    if not grading.get("sandbox_config"):
        return KernelManager(kernel_name=kernel_name, kernel_spec_manager=NbvalKernelspecManager())
    runtime = Path(grading["runtime"])
    uid = grading.get("uid")

    class SandboxedKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            command = super().format_kernel_cmd(extra_arguments)
            # the launcher runs as a plain script (-I -S: no site, no attnlab import): it needs only the stdlib
            return [sys.executable, "-I", "-S", str(Path(__file__).with_name("sandbox.py")), grading["sandbox_config"],
                    "--", *command]

        def write_connection_file(self, **kwargs):
            super().write_connection_file(**kwargs)
            if uid is not None:
                os.chown(self.connection_file, uid, uid)

    km = SandboxedKernelManager(kernel_name=kernel_name, kernel_spec_manager=NbvalKernelspecManager(),
                                transport="ipc", ip=str(runtime / "k"), connection_file=str(runtime / "kernel.json"))
    # interrupt by message: the kernel signals itself, inside its own session and PID namespace
    km.kernel_spec.interrupt_mode = "message"
    return km


def launch(grading: dict, kernel_name: str, **kwargs):
    """Start the kernel's process (this returns at once; the kernel boots meanwhile)."""
    if not grading.get("sandbox_config"):  # the kernel inherits this environment: where the trusted side listens
        os.environ["ATTNLAB_CHECK_SOCKET"] = grading.get("socket", "")
        os.environ["ATTNLAB_CHECK_KEY"] = grading.get("key", "")
    km = manager(grading, kernel_name)
    km.start_kernel(**kwargs)
    LAUNCHED["km"] = km
    return km


def launch_early(grading: dict, notebook: Path) -> dict:
    """Launch the kernel now, with the arguments nbval's ``RunningKernel`` will give, so that it boots while the
    runner is still building the notebook; its failure is raised when nbval asks for the kernel."""
    from nbval.kernel import CURRENT_ENV_KERNEL_NAME

    try:
        return {"km": launch(grading, CURRENT_ENV_KERNEL_NAME, stderr=open(os.devnull, "w"), cwd=str(notebook.parent))}
    except Exception as exc:
        return {"error": exc}


def start_early(argv: list[str]) -> None:
    """The grading's entry point, before pytest loads: launch the kernel of the grading named by ``argv``'s
    ``--attnlab-grading=FILE`` (when it names the notebook it will run), and keep it in :data:`EARLY`."""
    global EARLY
    if not hasattr(socket, "AF_UNIX"):  # the check socket is a TCP port, known once the hooks listen: launched then
        return
    path = next((arg.partition("=")[2] for arg in argv if arg.startswith("--attnlab-grading=")), "")
    if not path:
        return
    grading = json.loads(Path(path).read_text(encoding="utf-8"))
    if grading.get("notebook"):
        EARLY = launch_early(grading, Path(grading["notebook"]))
