"""Binder builds: environment.yml resolves on top of repo2docker's base environment, proved without Docker.

1. ``jupyter-repo2docker --no-build`` prints the build plan (the Dockerfile) for this repository: the Python it
   picked from environment.yml, the conda lock file of its base environment, ``mamba env update`` with our
   environment.yml, then ``postBuild``.
2. The base environment's Python packages are installed at the versions that lock file pins, exactly and without
   their dependencies, as conda installs a lock (``base_requirements``); they must be consistent (``pip check``).
3. environment.yml's pip section is installed over them as ``mamba env update`` does (``pip install -U -r``), then
   ``postBuild`` runs; ``pip check`` must pass: no installed package may be left with a requirement that is not met.
4. Jupyter Notebook, the image's command, serves the course: a notebook through the contents API, JupyterLab
   (``/lab``) with the ipywidgets extension and its JavaScript, the Notebook 7 page; and a kernel started through
   the server runs notebook 01's opening cells, then an explorer, which comes back as a widget.

Steps 1-3 install about 150 packages from PyPI, once: 7.7 minutes on the two development cores shared with a
dozen other jobs (load average 16). The environments are then kept, keyed by everything they are made from
(repo2docker's version and lock file, environment.yml, Python), under ``$ATTNLAB_TEST_CACHE`` (default
``~/.cache/attnlab-tests``); later runs re-run ``--no-build``, ``pip check``, postBuild and step 4 only: 2.3 minutes
at that load, most of it waiting for the CPU (27 s of CPU time). Conda-only packages of the base (python, nodejs, C libraries) are not recreated: pip cannot
see them, and nothing of ours depends on them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
from packaging.utils import canonicalize_name

from test_environment import ROOT, environment_pins
from test_package import copy_checkout

pytestmark = pytest.mark.binder

REPO2DOCKER = "jupyter-repo2docker==2026.4.0"  # the version mybinder.org runs; bump it to follow mybinder.org
CACHE = Path(os.environ.get("ATTNLAB_TEST_CACHE") or Path.home() / ".cache" / "attnlab-tests")
# conda-forge names of Python packages whose PyPI name differs; conda-only packages are left out by their build tag
CONDA_TO_PYPI = {"brotli-python": "brotli", "python-fastjsonschema": "fastjsonschema", "nbconvert-core": "nbconvert",
                 "jupyterhub-base": "jupyterhub"}
NOT_RECREATED = {"python", "pip", "setuptools", "wheel"}  # the venv's own


def _pip(python: Path, *args, cwd=None, timeout=1200) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), "-m", "pip", "--disable-pip-version-check", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _cached_venv(name: str, python: str, install) -> Path:
    """The venv ``CACHE/name`` (made by ``install(python_of_the_venv)`` on first use); its python."""
    path = CACHE / name
    done = path / ".complete"
    if not done.exists():
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([python, "-m", "venv", str(path)], check=True)
        install(path / "bin" / "python")
        done.write_text("")
    return path / "bin" / "python"


def _unescape(name: str) -> str:
    """A repo2docker build-script file name back to the path it copies (``-2f`` is ``/``; a hash suffix ends it)."""
    return re.sub(r"-([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), re.sub(r"-[0-9a-f]{6}$", "", name))


@pytest.fixture(scope="module")
def plan():
    """repo2docker's build plan for this repository: its Dockerfile, log and the base environment's lock file."""
    def install(python):
        result = _pip(python, "install", "--no-compile", REPO2DOCKER)
        assert result.returncode == 0, result.stderr[-3000:]

    python = _cached_venv(f"repo2docker-{REPO2DOCKER.split('==')[1]}", sys.executable, install)
    result = subprocess.run([str(python.parent / "jupyter-repo2docker"), "--no-build", "--no-run", str(ROOT)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    dockerfile, log = result.stdout, result.stderr
    copied = re.search(r"^COPY \S+ build_script_files/(\S+) /tmp/env/environment\.lock$", dockerfile, re.M)
    assert copied, "the build plan installs no conda lock file as the base environment"
    return {"dockerfile": dockerfile, "log": log, "lock": Path(_unescape(copied.group(1)))}


def base_requirements(lock: str) -> list[str]:
    """``name==version`` of every Python package of a conda lock file (its ``pyh*``/``py3NN*`` builds)."""
    pins = []
    for url in re.findall(r"^https://\S+", lock, re.M):
        filename = re.sub(r"\.(conda|tar\.bz2)$", "", url.rsplit("/", 1)[1].split("#")[0])
        name, version, build = filename.rsplit("-", 2)
        if re.match(r"py(h|\d)", build) and name not in NOT_RECREATED:
            pins.append(f"{CONDA_TO_PYPI.get(name, name)}=={version}")
    return pins


def test_the_build_plan_is_conda_on_python_311_then_our_environment_then_postbuild(plan):
    assert "Building conda environment for python=3.11" in plan["log"]
    assert plan["lock"].name == "environment.py-3.11-linux-64.lock" and plan["lock"].is_file()
    dockerfile = plan["dockerfile"]
    update = dockerfile.index('env update -p ${NB_PYTHON_PREFIX} --file "environment.yml"')
    assert dockerfile.index("/tmp/install-base-env.bash") < update < dockerfile.index("RUN ./postBuild")
    assert 'CMD ["jupyter", "notebook", "--ip", "0.0.0.0"]' in dockerfile


@pytest.fixture(scope="module")
def binder_python(plan):
    """A venv holding what the Binder image's notebook environment holds (steps 2 and 3); its python."""
    lock = plan["lock"].read_text()
    pip_section = [f"{name}=={version}" for name, version in environment_pins().items()]
    python = shutil.which("python3.11") if sys.version_info[:2] != (3, 11) else sys.executable
    if python is None:
        pytest.skip("the Binder image runs Python 3.11 (environment.yml), and there is no python3.11 here")
    key = hashlib.sha256("\n".join([REPO2DOCKER, lock, *pip_section, python]).encode()).hexdigest()[:16]

    def install(env_python):
        base = env_python.parent.parent / "base-requirements.txt"
        base.write_text("\n".join(base_requirements(lock)) + "\n")
        result = _pip(env_python, "install", "--no-compile", "--no-deps", "-r", base)
        assert result.returncode == 0, result.stderr[-3000:]
        check = _pip(env_python, "check")
        assert check.returncode == 0, f"repo2docker's base environment is not consistent:\n{check.stdout}"
        ours = env_python.parent.parent / "environment-pip.txt"
        ours.write_text("\n".join(pip_section) + "\n")
        result = _pip(env_python, "install", "--no-compile", "-U", "-r", ours)
        assert result.returncode == 0, result.stderr[-3000:]

    return Path(_cached_venv(f"binder-{key}", python, install))


@pytest.fixture(scope="module")
def binder_repo(binder_python, tmp_path_factory):
    """The repository as the image holds it, after postBuild ran in it with the image's environment first on PATH."""
    repo = copy_checkout(tmp_path_factory.mktemp("binder") / "repo")
    env = {**os.environ, "PATH": f"{binder_python.parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run(["bash", "postBuild"], cwd=repo, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return repo


def test_our_environment_over_the_base_leaves_no_broken_requirement(binder_repo, binder_python):
    check = _pip(binder_python, "check")
    assert check.returncode == 0, check.stdout
    listed = json.loads(_pip(binder_python, "list", "--format=json").stdout)
    versions = {canonicalize_name(d["name"]): d["version"] for d in listed}
    for name, version in environment_pins().items():  # ours win where the base had another version
        assert versions[canonicalize_name(name)] == version, name
    assert versions["attnlab"]  # installed by postBuild


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(binder_repo, binder_python, tmp_path_factory):
    """``jupyter notebook`` (the image's command) of the Binder environment, on a loopback port: (base URL, token)."""
    home = tmp_path_factory.mktemp("home")
    port, token = _free_port(), uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "PYTEST_", "VIRTUAL_ENV"))}
    env.update(HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "config"), JUPYTER_DATA_DIR=str(home / "data"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), IPYTHONDIR=str(home / "ipython"),
               PATH=f"{binder_python.parent}{os.pathsep}{env['PATH']}")
    log = open(home / "server.log", "w")
    proc = subprocess.Popen([str(binder_python.parent / "jupyter"), "notebook", "--no-browser", "--ip=127.0.0.1",
                             f"--port={port}", f"--IdentityProvider.token={token}", "--ServerApp.port_retries=0",
                             f"--ServerApp.root_dir={binder_repo}", *(["--allow-root"] if os.getuid() == 0 else [])],
                            cwd=binder_repo, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                get(base, token, "/api/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("the server did not start:\n" + (home / "server.log").read_text()[-3000:])
                time.sleep(0.5)
        yield base, token
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def get(base: str, token: str, path: str, data: dict | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"},
                                     data=None if data is None else json.dumps(data).encode(),
                                     method="GET" if data is None else "POST")
    with urllib.request.urlopen(request, timeout=60) as response:
        return response.status, response.read()


def test_the_server_serves_a_course_notebook_in_jupyterlab_and_notebook_7(server):
    base, token = server
    status, body = get(base, token, "/api/contents/notebooks/00_start_here.ipynb?content=1")
    model = json.loads(body)
    assert status == 200 and model["type"] == "notebook" and model["content"]["cells"]
    status, page = get(base, token, "/lab/tree/notebooks/00_start_here.ipynb")
    config = json.loads(re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                  page, re.S).group(1))
    widgets = next(e for e in config["federated_extensions"] if e["name"] == "@jupyter-widgets/jupyterlab-manager")
    status, script = get(base, token, f"/lab/extensions/{widgets['name']}/{widgets['load']}")
    assert status == 200 and len(script) > 1000
    status, page = get(base, token, "/notebooks/notebooks/00_start_here.ipynb")  # Notebook 7, Binder's default view
    assert status == 200 and b"jupyter-config-data" in page


def _messages(ws, msg_id: str, timeout: float = 120):
    """The kernel's iopub messages in reply to ``msg_id``, up to its return to idle."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raw = ws.recv()
        if isinstance(raw, bytes):  # a message with binary buffers: [n, offsets..., json, buffers...]
            offsets = [int.from_bytes(raw[4 * i:4 * i + 4], "big") for i in range(1, int.from_bytes(raw[:4], "big"))]
            raw = raw[offsets[0]:offsets[1] if len(offsets) > 1 else None]
        msg = json.loads(raw)
        if msg.get("parent_header", {}).get("msg_id") != msg_id or msg.get("channel") != "iopub":
            continue
        yield msg
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return
    raise TimeoutError(f"no reply to {msg_id} within {timeout} s")


EXPLORER = """\
from attnlab.widgets import explorer

explorer(lambda temperature=1.0: attnlab.softmax(np.array([1.0, 2.0, 3.0]) / temperature).round(2),
         temperature=(0.1, 5.0, 0.1))"""


def test_a_kernel_of_the_server_runs_a_notebooks_set_up_and_an_explorer_comes_back_as_a_widget(server, binder_repo):
    """Notebook 01's opening code cells (its Colab cell, if it has one yet, and its imports), then an explorer."""
    import nbformat
    import websocket

    base, token = server
    notebook = "notebooks/01_soft_lookup.ipynb"
    status, body = get(base, token, "/api/sessions", {"path": notebook, "type": "notebook", "name": "",
                                                      "kernel": {"name": "python3"}})
    kernel = json.loads(body)["kernel"]["id"]
    ws = websocket.create_connection(f"ws{base[4:]}/api/kernels/{kernel}/channels?token={token}", timeout=120)
    session = uuid.uuid4().hex
    cells = [c for c in nbformat.read(binder_repo / notebook, as_version=4).cells if c.cell_type == "code"]
    opening = [c.source for c in cells[:2] if c.metadata.get("attnlab", {}).get("role") == "colab"] + [
        next(c.source for c in cells if "attnlab" not in c.metadata)]
    try:
        for source in [*opening, EXPLORER]:
            msg_id = uuid.uuid4().hex
            ws.send(json.dumps({
                "header": {"msg_id": msg_id, "msg_type": "execute_request", "session": session, "username": "test",
                           "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
                "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
                "content": {"code": source, "silent": False, "store_history": True, "user_expressions": {},
                            "allow_stdin": False, "stop_on_error": True}}))
            replies = list(_messages(ws, msg_id))
            errors = [m["content"] for m in replies if m["msg_type"] == "error"]
            assert not errors, f"{source[:200]}\n-> {errors[0]['ename']}: {errors[0]['evalue']}"
            if source in opening[:-1]:  # the Colab cell: nothing at all outside Colab
                assert [m["msg_type"] for m in replies] == ["status", "execute_input", "status"]
    finally:
        ws.close()
    shown = [m["content"]["data"] for m in replies if m["msg_type"] in ("display_data", "execute_result")]
    assert any("application/vnd.jupyter.widget-view+json" in data for data in shown)
    opened = [m["content"] for m in replies if m["msg_type"] == "comm_open"]
    assert any(c["target_name"] == "jupyter.widget" for c in opened)
