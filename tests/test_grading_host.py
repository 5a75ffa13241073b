"""The grader's host side, without a kernel: reading submissions that may be links, FIFOs or devices; learner names
printed on one line; the CSV never written through a link; a uid per grading; cgroups (v2 written into a fake
hierarchy, v1 or v2 for real when this host has them); and the check socket's first message, which must carry the
grading's key. The sandboxed batches that perform these attacks are in test_grader_attacks.py."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from attnlab_course.grading import cli, isolation, nbval_hooks, report, runner, sandbox, submission
from attnlab.exercises import _protocol, _wire

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (other uids, cgroups)")


# --- submissions are files the instructor collected ----------------------------------------------------------------


def test_a_regular_file_is_read_and_anything_else_is_not_a_regular_file(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-CONTENT-1234")
    assert submission.read_regular_file(secret) == b"SECRET-CONTENT-1234"
    (tmp_path / "link.ipynb").symlink_to(secret)
    (tmp_path / "kmsg.ipynb").symlink_to("/proc/kmsg")
    os.mkfifo(tmp_path / "fifo.ipynb")  # nobody writes to it: opening it must not wait
    (tmp_path / "folder.ipynb").mkdir()
    start = time.monotonic()
    for name in ("link.ipynb", "kmsg.ipynb", "fifo.ipynb", "folder.ipynb"):
        with pytest.raises(submission.SubmissionError) as caught:
            submission.read_submission(tmp_path / name)
        assert str(caught.value) == submission.NOT_REGULAR and "SECRET" not in str(caught.value)
    with pytest.raises(submission.SubmissionError, match="not a regular file"):
        submission.read_regular_file("/dev/null")  # a device
    assert time.monotonic() - start < 5, "no link, FIFO or device made the grader wait"


def test_a_file_that_is_not_json_is_never_quoted(tmp_path):
    path = tmp_path / "02-private.ipynb"
    path.write_text("SECRET-CONTENT-1234 " * 10)
    report_ = runner.grade(path)
    assert report_.problem == "not a notebook (not JSON)"
    assert "SECRET" not in report.format_report(report_)


def test_a_file_over_the_size_limit_is_refused_without_reading_it(tmp_path):
    path = tmp_path / "big.ipynb"
    with open(path, "wb") as f:
        f.truncate(submission.MAX_FILE_BYTES + 1)  # sparse: nothing to read
    with pytest.raises(submission.SubmissionError, match="MiB; the grader reads notebooks of up to"):
        submission.read_regular_file(path)


def test_odd_names_and_notebook_ids_cannot_be_graded_and_say_why(tmp_path):
    long_name = tmp_path / ("x" * 201 + ".ipynb")
    long_name.write_text("{}")
    assert runner.grade(long_name).problem.startswith("the file name is 207 characters long")
    for notebook_id in ("x" * 300, "../02_masks", "02_masks\nAll exercises passed", 2):
        path = tmp_path / "02-odd.ipynb"
        path.write_text('{"cells": [], "metadata": {"attnlab": {"notebook": %s}}, "nbformat": 4, "nbformat_minor": 5}'
                        % __import__("json").dumps(notebook_id))
        problem = runner.grade(path).problem
        assert problem.startswith("the notebook id in the file's metadata"), problem
        assert "\n" not in problem and "x" * 20 not in problem


# --- names on one line ----------------------------------------------------------------------------------------------


def test_learner_text_is_printed_on_one_line_with_its_control_characters_escaped():
    assert report.one_line("a\nb\r\x1b[2K\x08\tc\u202e\u2028\udcff") == "a\\nb\\r\\x1b[2K\\x08\\tc\\u202e\\u2028\\xff"
    assert report.clean("line one\nline\x1b two") == "line one\nline\\x1b two"  # a message keeps its own lines
    assert report.csv_cell("=1\n2") == "'=1\\n2"
    fake = runner.Report(Path("02-a\nAll exercises passed: 30 of 30 learners.ipynb"), problem="x\ny")
    fake.notes = ["a\nb"]
    for text in (report.format_report(fake), report.format_summary([fake], 1.0, 1)):
        assert not any(line.startswith("All exercises passed: 30") for line in text.splitlines()), text
        assert "02-a\\nAll exercises passed" in text and "x\\ny" in text


def test_the_csv_is_never_written_through_a_link_or_into_a_fifo(tmp_path, capsys):
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    link = tmp_path / "results.csv"
    link.symlink_to(target)
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    for destination in (link, fifo):
        with pytest.raises(OSError):
            report.write_csv([], destination)
        folder = tmp_path / "subs"
        folder.mkdir(exist_ok=True)
        (folder / "a.ipynb").write_text("{}")
        with pytest.raises(SystemExit):
            cli.main(["--batch", str(folder), "--csv", str(destination), "--no-sandbox"])
        assert "does not write through links" in capsys.readouterr().err or destination == fifo
    assert target.read_text() == "keep me"
    report.write_csv([], tmp_path / "fine.csv")
    assert (tmp_path / "fine.csv").read_text().startswith("learner,file,notebook")


# --- a uid per grading ----------------------------------------------------------------------------------------------


@ROOT_ONLY
def test_concurrent_gradings_get_distinct_unused_uids():
    leases = []
    threads = [threading.Thread(target=lambda: leases.append(isolation.lease_uid())) for _ in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        uids = [lease.uid for lease in leases]
        assert len(set(uids)) == 40, "every concurrent grading has a uid of its own, however many run at once"
        assert not set(uids) & isolation.process_uids()
        assert not any(isolation._has_account(uid) for uid in uids)
    finally:
        for lease in leases:
            lease.release()


@ROOT_ONLY
def test_a_uid_with_a_process_or_held_by_another_grader_is_skipped():
    base = isolation.lease_uid()
    base.release()
    sleeper = subprocess.Popen(["sleep", "30"], user=base.uid, group=base.uid, extra_groups=[])
    holder = subprocess.Popen([sys.executable, "-c", "import time\nfrom attnlab_course.grading import isolation\n"
                               f"lease = isolation.lease_uid({base.uid + 1})\nprint(lease.uid, flush=True)\n"
                               "time.sleep(30)"], stdout=subprocess.PIPE, text=True)
    try:
        held = int(holder.stdout.readline())  # base.uid + 1, or a later one if a concurrent grading holds that
        for start, taken in ((base.uid, "a uid with a process"), (held, "a uid leased by another grader")):
            lease = isolation.lease_uid(start)
            try:
                assert lease.uid not in (base.uid, held), f"{taken} is skipped"
            finally:
                lease.release()
    finally:
        sleeper.kill()
        holder.kill()
        sleeper.wait()
        holder.wait()


@ROOT_ONLY
def test_the_end_of_a_grading_kills_its_uids_live_processes_and_does_not_wait_for_a_zombie():
    lease = isolation.lease_uid()
    uid = lease.uid
    lease.release()
    live = subprocess.Popen(["sleep", "30"], user=uid, group=uid, extra_groups=[])
    dead = subprocess.Popen(["true"], user=uid, group=uid, extra_groups=[])  # not waited for: a zombie
    try:
        deadline = time.monotonic() + 5
        while not isolation._zombie(Path(f"/proc/{dead.pid}")) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert isolation.kill_uid(uid) == 1, "the live process is killed, the zombie is not counted"
        assert live.wait(timeout=5) == -9
        assert isolation.kill_uid(uid) == 0, "only a zombie is left: nothing to wait for"
        assert uid in isolation.process_uids(), "a zombie's uid is still busy, so it is not leased meanwhile"
    finally:
        live.kill()
        live.wait()
        dead.wait()


# --- cgroups --------------------------------------------------------------------------------------------------------


LIMITS = replace(runner.LIMITS, memory_total=96 * 2**20, processes=8, cpus=0.5)


def test_a_cgroup_v2_gets_memory_max_pids_max_and_cpu_max(tmp_path, monkeypatch):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (unified / "cgroup.subtree_control").write_text("cpu\n")
    writes = []

    def write(path, value):  # a fake hierarchy: the kernel would have made these files
        writes.append((str(Path(path).relative_to(tmp_path)), value))
        Path(path).write_text(value)

    monkeypatch.setattr(isolation, "_write", write)
    monkeypatch.delenv(isolation.NO_CGROUP_ENV, raising=False)
    cgroup = isolation.make_cgroup(LIMITS, root=tmp_path)
    assert cgroup.version == "v2" and len(cgroup.folders) == 1
    folder = cgroup.folders[0]
    assert folder.parent == unified / "attnlab-check"
    assert ("unified/cgroup.subtree_control", "+memory +pids") in writes
    assert (folder.parent / "cgroup.subtree_control").read_text() == "+memory +pids +cpu"
    assert {f.name: f.read_text() for f in folder.iterdir()} == {
        "memory.max": str(96 * 2**20), "pids.max": "8", "cpu.max": "50000 100000"}
    assert cgroup.procs_files == [str(folder / "cgroup.procs")]


def test_a_cgroup_v1_gets_limit_in_bytes_pids_max_and_cfs_quota(tmp_path, monkeypatch):
    for controller in isolation.CONTROLLERS:
        (tmp_path / controller).mkdir()
    monkeypatch.setattr(isolation, "_write", lambda path, value: Path(path).write_text(value))
    monkeypatch.delenv(isolation.NO_CGROUP_ENV, raising=False)
    cgroup = isolation.make_cgroup(LIMITS, root=tmp_path)
    assert cgroup.version == "v1" and [f.parent.name for f in cgroup.folders] == ["memory", "pids", "cpu"]
    memory, pids, cpu = ({f.name: f.read_text() for f in folder.iterdir()} for folder in cgroup.folders)
    assert memory == {"memory.limit_in_bytes": str(96 * 2**20)} and pids == {"pids.max": "8"}
    assert cpu == {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "50000"}


def test_without_a_cgroup_the_gradings_fall_back_and_say_why(monkeypatch):
    monkeypatch.setenv(isolation.NO_CGROUP_ENV, "1")
    assert isolation.cgroup_unavailable_reason() == f"turned off by {isolation.NO_CGROUP_ENV}"
    with pytest.raises(isolation.CgroupUnavailable):
        isolation.make_cgroup(LIMITS)
    host = isolation.start_grading(True, LIMITS)
    try:
        assert host.cgroup is None
    finally:
        host.end()


_HOG = """
import os, sys, time
for procs in sys.argv[1:]:
    with open(procs, "w") as f:
        f.write(str(os.getpid()))
forks = 0
try:
    for _ in range(20):
        if os.fork() == 0:
            os.close(1), os.close(2)  # the test waits for the end of the output
            time.sleep(60)
            os._exit(0)
        forks += 1
except OSError:
    pass
print(forks, flush=True)
block = b"x" * (200 * 2**20)  # over the cgroup's 96 MiB: the OOM killer stops it
print("not stopped", flush=True)
"""


@ROOT_ONLY
def test_a_real_cgroup_caps_processes_and_memory_and_its_end_kills_everything(monkeypatch):
    monkeypatch.delenv(isolation.NO_CGROUP_ENV, raising=False)
    if isolation.cgroup_unavailable_reason():
        pytest.skip(f"no cgroup on this host: {isolation.cgroup_unavailable_reason()}")
    cgroup = isolation.make_cgroup(LIMITS)
    try:
        done = subprocess.run([sys.executable, "-I", "-S", "-c", _HOG, *cgroup.procs_files], capture_output=True,
                              text=True, timeout=60)
        forks = int(done.stdout.split()[0])
        assert forks < LIMITS.processes, "pids.max stopped the forks"
        assert "not stopped" not in done.stdout and done.returncode == -9, "the memory limit killed it"
        assert cgroup.pids(), "its sleeping children are still in the cgroup"
        assert cgroup.kill() and not cgroup.pids()
    finally:
        cgroup.kill()
        cgroup.remove()
    assert not any(folder.exists() for folder in cgroup.folders)


# --- the check socket -----------------------------------------------------------------------------------------------


def test_the_check_socket_serves_only_a_connection_that_knows_the_gradings_key(tmp_path):
    address = str(tmp_path / "check.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(8)
    strangers = []

    def connect(first: dict | None):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(address)
        if first is not None:
            _wire.send(sock, first)
        _protocol.send(sock, _protocol.Begin("2.1"))
        return sock

    with listener:
        strangers = [connect(None), connect(_protocol.to_frame(_protocol.Hello("guess"))), connect({"kind": "Hello"}),
                     connect({"op": "hello", "key": "k" * 64})]
        kernel = connect(_protocol.to_frame(_protocol.Hello("k" * 64)))
        accepted = nbval_hooks.accept_kernel(listener, "k" * 64, time.monotonic() + 10, hello_seconds=1)
        assert accepted is not None
        conn, begin = accepted
        assert begin == _protocol.Begin("2.1")
        for sock in strangers:
            sock.settimeout(2)
            try:
                answer = sock.recv(1)
            except ConnectionResetError:  # closed with the stranger's Begin unread: a reset, not an answer
                answer = b""
            assert answer == b"", "a connection without the key is closed unanswered"
        assert nbval_hooks.accept_kernel(listener, "k" * 64, time.monotonic() + 0.3) is None
        for sock in [conn, kernel, *strangers]:
            sock.close()


def test_runtime_folders_are_private(tmp_path):
    runtime, seed = sandbox.runtime_dir(tmp_path, None)
    assert runtime == seed and stat.S_IMODE(runtime.stat().st_mode) == 0o700
    (tmp_path / "as_root").mkdir()
    runtime_root, seed_root = sandbox.runtime_dir(tmp_path / "as_root", 1_900_000_000)
    assert seed_root != runtime_root and stat.S_IMODE(runtime_root.stat().st_mode) == 0o700
    assert stat.S_IMODE(seed_root.stat().st_mode) == 0o700


def test_as_root_the_kernels_tmp_home_and_shm_are_the_launchers_scratch_tmpfs(tmp_path):
    config = sandbox.Config(runtime=str(tmp_path / "run"))
    args = sandbox.bwrap_args(config, scratch="/s")
    for part, path in (("tmp", "/tmp"), ("home", sandbox.HOME), ("shm", "/dev/shm")):
        assert args[args.index(f"/s/{part}") - 1:args.index(f"/s/{part}") + 2] == ["--bind", f"/s/{part}", path]
    assert "--size" not in args, "the scratch tmpfs has the size and inode limits (bubblewrap's has no inode limit)"
    plain = sandbox.bwrap_args(config)
    assert plain.count("--size") == 3 and "/s/tmp" not in plain
