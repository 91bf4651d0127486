"""The TF_CONFIG launcher: a real job of separate processes, as separate hosts, bad configs.

Every process a test starts carries a unique ``KSYNC_TEST_RUN`` token in its environment;
the finalizers kill whatever still carries it (also processes inside network namespaces
and grandchildren that left their process group), so nothing outlives a failing test.
"""

import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from strategies.launch_control import ChiefWatch, ControlServer, control_address
from strategies.tf_config import TFConfig
from conftest import processes_with

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLE = [sys.executable, str(REPO / "examples" / "train_digits.py"), "--policy", "bsp",
           "--epochs", "2", "--steps-per-epoch", "30"]
LAUNCH = [sys.executable, "-m", "strategies.launch"]


def free_ports(count):
    from cluster_sim.local_cluster import free_ports as _free
    return _free(count)


def tf_config(cluster, job, index=0):
    return json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})


class Job:
    """Processes of one test, each in its own session, logging to files; killed at the end."""

    def __init__(self, tmp_path):
        self.token = uuid.uuid4().hex
        self.tmp_path = tmp_path
        self.procs = {}

    def start(self, name, cmd, tf_config_json, extra_env=None):
        # TensorFlow's log level is left to the launcher, as for a user.
        env = dict(os.environ, TF_CONFIG=tf_config_json, KSYNC_TEST_RUN=self.token,
                   CUDA_VISIBLE_DEVICES="-1", PYTHONUNBUFFERED="1")
        env.pop("TF_CPP_MIN_LOG_LEVEL", None)
        env.update(extra_env or {})
        if tf_config_json is None:
            del env["TF_CONFIG"]
        log = open(self.tmp_path / f"{name}.log", "wb")
        proc = subprocess.Popen(cmd, env=env, cwd=REPO, stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self.procs[name] = proc
        return proc

    def log(self, name):
        return (self.tmp_path / f"{name}.log").read_text(errors="replace")

    def logs(self):
        return "\n".join(f"----- {n} -----\n{self.log(n)[-3000:]}" for n in self.procs)

    def wait(self, name, timeout_s):
        try:
            return self.procs[name].wait(timeout_s)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still running after {timeout_s} s\n{self.logs()}")

    def kill_all(self):
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in processes_with(self.token):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            proc.wait()


@pytest.fixture
def job(tmp_path):
    j = Job(tmp_path)
    yield j
    j.kill_all()


def assert_no_error_lines(job):
    """No TensorFlow ERROR line (``E0000 ...``), absl ERROR or traceback in any task's
    output: the start-up and shutdown noise is filtered at the source."""
    for name in job.procs:
        noise = re.findall(r"^(?:E\d{4} .*|.*\bERROR\b.*|Traceback.*)$", job.log(name), re.M)
        assert noise == [], f"{name}:\n" + "\n".join(noise[:10])


def run_job(job, cluster, command_for_chief, launch=LAUNCH, extra_env=None):
    """Start ps and workers through the launcher, then the chief; return the timings."""
    started = time.monotonic()
    for name in ("ps", "worker"):
        for i in range(len(cluster[name])):
            job.start(f"{name}{i}", launch(f"{name}{i}") if callable(launch) else launch,
                      tf_config(cluster, name, i), extra_env)
    chief_cmd = (launch("chief0") if callable(launch) else launch)
    job.start("chief0", [*chief_cmd, "--timeout", "120", "--", *command_for_chief],
              tf_config(cluster, "chief"), extra_env)
    rc = job.wait("chief0", 150)
    chief_done = time.monotonic()
    assert rc == 0, f"chief exited with {rc}\n{job.logs()}"
    codes = {name: job.wait(name, 30) for name in job.procs}
    servers_done = time.monotonic()
    assert codes == {name: 0 for name in job.procs}, f"{codes}\n{job.logs()}"
    chief_log = job.log("chief0")
    result = json.loads(re.search(r"^RESULT (.*)$", chief_log, re.M).group(1))
    assert result["pushed"] == 60 and result["workers"] == len(cluster["worker"])
    assert result["accuracy"] > 0.5, result
    for name in job.procs:
        if name != "chief0":
            assert "the chief says the training script ended" in job.log(name), job.log(name)
    assert re.search(r"shut down 3 task\(s\) in", chief_log), chief_log
    # Nothing left: every launcher, server and the script itself are gone.
    assert processes_with(job.token) == [], job.logs()
    assert_no_error_lines(job)
    timings = {
        "tasks_reachable_s": float(re.search(r"all tasks reachable after ([\d.]+) s",
                                             chief_log).group(1)),
        "script_s": float(re.search(r"training script ended after ([\d.]+) s",
                                    chief_log).group(1)),
        "train_s": result["train_seconds"],
        "shutdown_s": float(re.search(r"shut down 3 task\(s\) in ([\d.]+) s",
                                      chief_log).group(1)),
        "all_exited_after_chief_s": round(servers_done - chief_done, 2),
        "total_s": round(servers_done - started, 2),
    }
    print(f"\nlaunch timings: {timings}")
    return result, timings


# -- (a) separate processes on 127.0.0.1 --------------------------------------------------

def test_ps_two_workers_and_chief_on_loopback_train_and_shut_down(job):
    ports = free_ports(5)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"],
               "worker": [f"127.0.0.1:{ports[2]}", f"127.0.0.1:{ports[3]}"]}
    run_job(job, cluster, EXAMPLE, extra_env={"KSYNC_CONTROL_PORT": str(ports[4])})


def test_example_runs_unchanged_on_one_machine_without_tf_config(job):
    # No TF_CONFIG: the same script starts its own local cluster through the harness.
    proc = job.start("local", [*EXAMPLE, "--workers", "2"], None)
    assert job.wait("local", 150) == 0, job.logs()
    log = job.log("local")
    result = json.loads(re.search(r"^RESULT (.*)$", log, re.M).group(1))
    assert result["pushed"] == 60 and result["workers"] == 2, result
    assert "remove function remotely" not in log  # torn down in order, no error spam
    assert_no_error_lines(job)
    assert proc.returncode == 0 and processes_with(job.token) == [], job.logs()


# -- (b) every task in its own network namespace ------------------------------------------

class Namespaces:
    """A bridge namespace and one namespace per task joined to it by veth pairs."""

    def __init__(self, hosts):
        self.prefix = f"ksl{os.getpid() % 100000}{uuid.uuid4().hex[:4]}"
        self.bridge = f"{self.prefix}br"
        self.hosts = hosts  # name -> address
        self.created = []

    def ip(self, *args):
        done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")

    def ns(self, name):
        return f"{self.prefix}{name}"

    def create(self):
        self.ip("netns", "add", self.bridge)
        self.created.append(self.bridge)
        self.ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        self.ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, (name, address) in enumerate(self.hosts.items()):
            ns = self.ns(name)
            self.ip("netns", "add", ns)
            self.created.append(ns)
            # veth names are global until moved, so they carry the unique prefix.
            outer, inner = f"{self.prefix}o{i}", f"{self.prefix}i{i}"
            self.ip("link", "add", outer, "type", "veth", "peer", "name", inner)
            self.ip("link", "set", outer, "netns", self.bridge)
            self.ip("link", "set", inner, "netns", ns)
            self.ip("-n", self.bridge, "link", "set", outer, "master", "br0", "up")
            self.ip("-n", ns, "link", "set", inner, "name", "eth0")
            self.ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            self.ip("-n", ns, "link", "set", "eth0", "up")
            self.ip("-n", ns, "link", "set", "lo", "up")

    def pids(self):
        out = []
        for ns in self.created:
            done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            out += done.stdout.split()
        return out

    def delete(self):
        # Kill what still runs inside first: a deleted name does not end a namespace
        # whose processes live on.
        for pid in self.pids():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        for ns in reversed(self.created):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.created = []


def _netns_unavailable():
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    probe = Namespaces({})
    try:
        probe.ip("netns", "add", probe.bridge)
        probe.created.append(probe.bridge)
        probe.ip("-n", probe.bridge, "link", "add", "br0", "type", "bridge")
    except (RuntimeError, OSError) as err:
        return f"`ip netns` is not usable here: {err}"
    finally:
        probe.delete()
    return None


def test_each_task_in_its_own_network_namespace(job, request):
    reason = _netns_unavailable()
    if reason and os.environ.get("KSYNC_REQUIRE_NETNS") == "1":
        pytest.fail(f"KSYNC_REQUIRE_NETNS=1 but {reason}")  # a machine that must run it
    if reason:
        pytest.skip(reason)
    # Every task on the same port, like one task per machine: only the address differs.
    hosts = {"chief0": "10.200.0.1", "ps0": "10.200.0.2", "worker0": "10.200.0.3",
             "worker1": "10.200.0.4"}
    spaces = Namespaces(hosts)
    request.addfinalizer(spaces.delete)  # also on failure; kills what runs inside first
    spaces.create()
    cluster = {"chief": ["10.200.0.1:2222"], "ps": ["10.200.0.2:2222"],
               "worker": ["10.200.0.3:2222", "10.200.0.4:2222"]}

    def launch(name):
        return ["ip", "netns", "exec", spaces.ns(name), *LAUNCH]

    def probe_from(name, address):
        code = ("import sys; from strategies.launch_net import probe; "
                f"print(probe({address!r}, 2.0))")
        return subprocess.run(["ip", "netns", "exec", spaces.ns(name), sys.executable, "-c",
                               code], capture_output=True, text=True, cwd=REPO,
                              timeout=30).stdout.strip()

    # Like separate machines: from the chief's namespace the ps's port answers over the
    # bridge, and the same port on its own loopback leads nowhere.
    job.start("listener", ["ip", "netns", "exec", spaces.ns("ps0"), sys.executable, "-c",
                           "import socket, time; s = socket.socket(); "
                           "s.bind(('0.0.0.0', 2222)); s.listen(); time.sleep(60)"], None)
    deadline = time.monotonic() + 30
    while probe_from("chief0", "10.200.0.2:2222") != "None":
        assert time.monotonic() < deadline, job.logs()
        time.sleep(0.2)
    assert probe_from("chief0", "127.0.0.1:2222").startswith("connection refused")
    assert probe_from("worker0", "127.0.0.1:2222").startswith("connection refused")
    job.kill_all()
    job.procs.clear()

    run_job(job, cluster, EXAMPLE, launch=launch)
    assert spaces.pids() == [], "processes left in the test namespaces"


# -- (c) invalid TF_CONFIG and unreachable tasks fail fast, naming the problem --------------

GOOD = {"chief": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223"], "worker": ["127.0.0.1:2224"]}


def launch_quick(tf_config_json, *args, env=None, timeout_s=20):
    """Run the launcher; it must end (with its error) well within ``timeout_s``."""
    full_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    full_env.pop("TF_CONFIG", None)
    full_env.pop("KSYNC_CONTROL_PORT", None)
    if tf_config_json is not None:
        full_env["TF_CONFIG"] = tf_config_json
    full_env.update(env or {})
    started = time.monotonic()
    done = subprocess.run([*LAUNCH, *args], env=full_env, cwd=REPO, capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


@pytest.mark.parametrize("raw, message", [
    (None, "TF_CONFIG is not set"),
    ('{"cluster": {"ps": ["a:1"]', "not valid JSON"),
    ('["ps"]', "must be a JSON object"),
    ('{"task": {"type": "ps", "index": 0}}', 'no "cluster"'),
    (json.dumps({"cluster": GOOD}), 'no "task"'),
    (tf_config(GOOD, "worker", 1), r"index 1 is out of range: job 'worker' has 1 task"),
    (tf_config(GOOD, "worker", -1), "out of range"),
    (tf_config({**GOOD, "trainer": ["127.0.0.1:2225"]}, "worker"),
     "names job 'trainer', which a parameter-server cluster does not use"),
    (tf_config(GOOD, "evaluator"), "task type 'evaluator' is not a job of the cluster"),
    (tf_config({"chief": ["h:1"], "worker": ["h:2"]}, "worker"), "has no 'ps' job"),
    (tf_config({**GOOD, "worker": ["127.0.0.1:2223"]}, "worker"),
     "ps:0 and worker:0 the same address"),
    (tf_config({**GOOD, "ps": ["127.0.0.1"]}, "worker"), 'is not "host:port"'),
    (tf_config({"ps": ["h:1"], "worker": ["h:2"]}, "worker"), 'no "chief" job'),
    (tf_config({"chief": ["h:2222"], "ps": ["h:3222"], "worker": ["h:1"]}, "ps"),
     "control port 3222 .* is also the TensorFlow port of ps:0"),
], ids=lambda v: None if v is None or len(v) < 40 else v[-38:])
def test_invalid_tf_config_fails_within_seconds(raw, message):
    rc, out, seconds = launch_quick(raw)
    assert rc == 2, out
    assert re.search(message, out), out
    assert "Traceback" not in out, out
    assert seconds < 15


def test_bad_control_port_env_and_misplaced_commands():
    rc, out, _ = launch_quick(tf_config(GOOD, "ps"), env={"KSYNC_CONTROL_PORT": "x"})
    assert rc == 2 and "KSYNC_CONTROL_PORT='x' is not a port" in out, out
    rc, out, _ = launch_quick(tf_config(GOOD, "worker"), "--", "python", "train.py")
    assert rc == 2 and "runs no script" in out, out
    rc, out, _ = launch_quick(tf_config(GOOD, "chief"))
    assert rc == 2 and "give the training command after `--`" in out, out


@pytest.fixture
def listener():
    """A socket listening on a free 127.0.0.1 port, as another program would."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


@pytest.mark.parametrize("task", ["ps", "worker", "chief"])
def test_port_in_use_is_named_before_tensorflow_starts(listener, task):
    ports = free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"],
               "worker": [f"127.0.0.1:{ports[2]}"]}
    cluster[task] = [f"127.0.0.1:{listener}"]
    # A control port of its own: the default (chief port + 1000) can land on a task's.
    rc, out, seconds = launch_quick(tf_config(cluster, task), *(
        ["--", "python", "-c", "pass"] if task == "chief" else []),
        env={"KSYNC_CONTROL_PORT": str(ports[3])})
    assert rc == 2, out
    assert f"port {listener} of {task}:0 (127.0.0.1:{listener}) is not free" in out, out
    assert "ss -ltnp" in out and "Traceback" not in out, out
    assert seconds < 15


def test_control_port_in_use_is_named(listener):
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"],
               "worker": [f"127.0.0.1:{ports[2]}"]}
    rc, out, _ = launch_quick(tf_config(cluster, "chief"), "--", "true",
                              env={"KSYNC_CONTROL_PORT": str(listener)})
    assert rc == 2 and f"cannot listen on control port {listener}" in out, out


def test_chief_names_each_unreachable_task_after_its_timeout(listener):
    ports = free_ports(4)
    # ps answers (a plain listener stands in for it); both workers never come up.
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{listener}"],
               "worker": [f"127.0.0.1:{ports[1]}", f"127.0.0.1:{ports[2]}"]}
    env = {"KSYNC_CONTROL_PORT": str(ports[3])}
    rc, out, seconds = launch_quick(tf_config(cluster, "chief"), "--timeout", "2", "--",
                                    "python", "-c", "raise SystemExit('must not run')",
                                    env=env)
    assert rc == 3, out
    assert "2 task(s) not reachable within 2 s" in out, out
    assert f"worker:0 at 127.0.0.1:{ports[1]}: connection refused" in out, out
    assert f"worker:1 at 127.0.0.1:{ports[2]}: connection refused" in out, out
    assert "ps:0 is reachable" in out and "must not run" not in out, out
    assert 2 <= seconds < 15

    rc, out, seconds = launch_quick(tf_config(cluster, "worker", 1), "--check", "--timeout",
                                    "1", env=env)
    assert rc == 3, out
    assert re.search(r"^worker\s+1\s+127\.0\.0\.1:\d+\s+<- this task$", out, re.M), out
    assert "ps:0: reachable" in out and "worker:0: NOT reachable within 1 s" in out, out
    assert "chief:0: NOT reachable" in out and "worker:1 (this task): port" in out, out
    assert seconds < 15


def test_check_passes_when_every_task_answers(listener):
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        ports = free_ports(2)
        # The chief counts as present when its launcher's control port answers.
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{listener}"],
                   "worker": [f"127.0.0.1:{ports[1]}", f"localhost:{listener}"]}
        rc, out, _ = launch_quick(tf_config(cluster, "worker", 0), "--check", "--timeout",
                                  "1", env={"KSYNC_CONTROL_PORT": str(other.getsockname()[1])})
    assert rc == 0, out
    assert "check passed: all 3 other task(s) reachable" in out, out
    assert "worker:0 (this task): port" in out, out


def test_strategy_from_tf_config_refuses_non_chief_and_unreachable_cluster():
    from strategies.launch import strategy_from_tf_config
    with pytest.raises(ValueError, match="only the chief builds the strategy"):
        strategy_from_tf_config(env={"TF_CONFIG": tf_config(GOOD, "worker")})
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"],
               "worker": [f"127.0.0.1:{ports[2]}"]}
    with pytest.raises(TimeoutError, match=r"ps:0 at 127\.0\.0\.1:\d+: connection refused"):
        strategy_from_tf_config(env={"TF_CONFIG": tf_config(cluster, "chief")}, wait_s=0.5)


# -- the shutdown channel ------------------------------------------------------------------

def test_control_channel_done_failure_and_lost_chief():
    server = ControlServer(0, expected=["ps:0", "worker:0"]).start()
    address = f"127.0.0.1:{server.port}"
    ps, worker = ChiefWatch(address, "ps:0", grace_s=0.3), ChiefWatch(address, "worker:0")
    assert ps.check() is None and worker.check() is None
    server.set_running()
    assert ps.check() is None
    server.finish(4, "the training script failed (exit code 4)")
    code, message = ps.check()
    assert code == 1 and "failed (exit code 4)" in message
    assert server.wait_acknowledged(0.2) == ["worker:0"]
    assert worker.check()[0] == 1 and server.wait_acknowledged(0.2) == []
    server.close()

    # A chief that vanishes without saying so: stop after the grace period, not before.
    lost = ChiefWatch(address, "ps:0", grace_s=0.3)
    lost.last_seen = time.monotonic()
    assert lost.check() is None
    time.sleep(0.4)
    code, message = lost.check()
    assert code == 3 and "unreachable for" in message

    never = ChiefWatch(address, "ps:0", timeout_s=0.1)
    time.sleep(0.2)
    code, message = never.check()
    assert code == 3 and "was not reachable within 0.1 s" in message


def test_control_address_default_env_and_flag():
    cfg = TFConfig.parse(tf_config({"chief": ["10.0.0.1:2222"], "ps": ["10.0.0.2:2222"],
                                    "worker": ["10.0.0.3:2222"]}, "ps"))
    assert control_address(cfg, env={}) == "10.0.0.1:3222"
    assert control_address(cfg, env={"KSYNC_CONTROL_PORT": "4000"}) == "10.0.0.1:4000"
    assert control_address(cfg, 5000, env={"KSYNC_CONTROL_PORT": "4000"}) == "10.0.0.1:5000"
    high = TFConfig.parse(tf_config({"chief": ["h:65000"], "ps": ["h:1"], "worker": ["h:2"]},
                                    "ps"))
    assert control_address(high, env={}) == "h:64000"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
def test_signalled_chief_stops_its_script_and_tells_the_servers(job, sig):
    """SIGTERM reaches the script and the servers hear "done"; after SIGKILL of the
    launcher the script still dies (parent-death signal) and the servers see it gone."""
    with socket.socket() as ps, socket.socket() as worker:
        for sock in (ps, worker):  # stand-ins: the chief only needs their ports to answer
            sock.bind(("127.0.0.1", 0))
            sock.listen()
        ports = free_ports(2)
        cluster = {"chief": [f"127.0.0.1:{ports[0]}"],
                   "ps": [f"127.0.0.1:{ps.getsockname()[1]}"],
                   "worker": [f"127.0.0.1:{worker.getsockname()[1]}"]}
        chief = job.start("chief0", [*LAUNCH, "--timeout", "10", "--", sys.executable, "-c",
                                     "import time; print('script up', flush=True); "
                                     "time.sleep(120)"],
                          tf_config(cluster, "chief"), {"KSYNC_CONTROL_PORT": str(ports[1])})
        watches = [ChiefWatch(f"127.0.0.1:{ports[1]}", t, grace_s=0.5)
                   for t in ("ps:0", "worker:0")]
        deadline = time.monotonic() + 30
        # Like real servers, the watches have seen the chief's launcher before it goes.
        while "script up" not in job.log("chief0") or None in [w.last_seen for w in watches]:
            assert time.monotonic() < deadline and chief.poll() is None, job.logs()
            assert [w.check() for w in watches] == [None, None]
            time.sleep(0.1)
        os.kill(chief.pid, sig)
        deadline = time.monotonic() + 15  # start-up under load must not eat this phase's time
        verdicts = [None, None]
        while None in verdicts:
            assert time.monotonic() < deadline, (
                f"{verdicts} {[w.last_error for w in watches]} {chief.poll()}\n{job.logs()}")
            verdicts = [v or w.check() for v, w in zip(verdicts, watches)]
            time.sleep(0.1)
    # The stand-in servers are gone now, as real ones exit on their verdict.
    rc = job.wait("chief0", 15)
    if sig == signal.SIGTERM:
        assert rc == 143, job.logs()
        assert [v[0] for v in verdicts] == [1, 1], verdicts
        assert "exit code 143" in verdicts[0][1] and "after SIGTERM" in verdicts[0][1]
    else:
        assert [v[0] for v in verdicts] == [3, 3], verdicts
    deadline = time.monotonic() + 10
    while processes_with(job.token):  # the script's parent-death signal is asynchronous
        assert time.monotonic() < deadline, f"left running: {processes_with(job.token)}"
        time.sleep(0.1)


def test_a_signal_handed_to_another_thread_still_reaches_the_script():
    """The kernel may deliver the launcher's SIGTERM to its control-server thread; the
    handler (main thread only) must still run while the script runs, not after it ends."""
    from strategies.launch import _wait_interruptibly
    script = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    old = signal.signal(signal.SIGUSR1, lambda *_: script.terminate())
    try:
        other = threading.Thread(target=lambda: (time.sleep(0.3), signal.pthread_kill(
            threading.get_ident(), signal.SIGUSR1)))
        other.start()
        started = time.monotonic()
        assert _wait_interruptibly(script) == -signal.SIGTERM
        assert time.monotonic() - started < 10
        other.join()
    finally:
        signal.signal(signal.SIGUSR1, old)
        script.kill()
        script.wait()


@pytest.mark.cluster
def test_tfjob_manifest_runs_the_example_through_the_launcher():
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load((REPO / "examples" / "tfjob.yaml").read_text())
    assert spec["kind"] == "TFJob"
    replicas = spec["spec"]["tfReplicaSpecs"]
    assert {name: r["replicas"] for name, r in replicas.items()} == {
        "Chief": 1, "PS": 1, "Worker": 2}
    for name, r in replicas.items():
        (container,) = r["template"]["spec"]["containers"]
        assert container["name"] == "tensorflow" and container["command"][0] == "ksync-launch"
        if name == "Chief":
            script = container["command"][container["command"].index("--") + 2]
            assert (REPO / script).is_file()
            assert build_parser_accepts(container["command"][1:])
        else:
            assert container["command"] == ["ksync-launch"]


def build_parser_accepts(argv):
    from strategies.launch import build_parser
    return build_parser().parse_args(argv) is not None


def test_a_server_whose_chief_never_comes_stops_after_its_timeout_and_says_why():
    ports = free_ports(3)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{ports[1]}"],
               "worker": [f"127.0.0.1:{ports[2]}"]}
    rc, out, seconds = launch_quick(tf_config(cluster, "ps"), "--timeout", "2", timeout_s=90,
                                    env={"KSYNC_CONTROL_PORT": str(free_ports(1)[0])})
    assert rc == 3, out
    assert "up to 2 s in all" in out and "--timeout inf" in out, out
    assert "was not reachable within 2 s" in out, out
    # The default is a limit too, and --help says which.
    assert "default 600" in " ".join(subprocess.run(
        [*LAUNCH, "--help"], capture_output=True, text=True, cwd=REPO).stdout.split())
