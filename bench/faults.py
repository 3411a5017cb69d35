#!/usr/bin/python3
"""Fault injection: a training job under `strata launch --max-restarts`, faults injected on a seeded
schedule, and per fault kind: injected, detected, culprit named correctly, time to detect, time to
recover, steps lost, hangs, wrong checkpoints accepted; then the job's effective training time.

usage: bench/faults.py [--strata build/release/strata] [--seed 1] [--ranks 4] [--repeat 3]
                       [--kinds kill,kill0,stop,...] [--timeout-ms 3000] [--out DIR]
                       [--link-mbit 800] [--slow-mbit 10] [--link-window 5] [--slow-detect-s 120]
       bench/faults.py --soak MINUTES [--every 120]   one long job, a fault every N seconds

Kinds (each injected --repeat times into its own job, except in --soak):
  kill          SIGKILL of a random rank other than 0
  kill0         SIGKILL of rank 0, which serves the store
  stop          SIGSTOP of a random rank (named by the census after the timeout)
  store_garbage random bytes, silent connections and a 64 MiB frame on the store port (the job
                must not notice: detected = survived untouched, no restart)
  strangers     silent and garbage connections on every rank's TCP data port (ranks over TCP)
  enospc        the checkpoint directory (a small tmpfs) fills up before a checkpoint write;
                freed again once the failure is reported
  ckpt_corrupt  the newest committed step's rank-1 shard gets flipped bytes, then a rank is killed:
                the restart must refuse that step and resume from an older one
  ckpt_mixed    the newest step's rank-0 shard replaced by an older step's, then a kill
  ckpt_foreign  the newest step's rank-0 shard replaced by another run's, then a kill
  linkcut       on the emulated cluster: a random rank's host loses its cable (its switch port goes
                down) mid-training, and gets it back once the job noticed; every survivor and the
                verdict must name it, and the restart resume from memory
  slowlink      on the emulated cluster: a random rank's host NIC is cut to --slow-mbit both ways;
                a link of it must be flagged slow (rank 0's warning, the metrics) and training go
                on without a restart; then the rate comes back and the flag must clear

The link kinds run the job through bench/emu_cluster.sh --launch (one rack of --ranks hosts, one
rank each, --link-mbit NICs; the ranks enter their hosts through bench/emu_enter.sh) and need root,
network namespaces and tbf, as enospc needs root (mount -t tmpfs); where they cannot run they
report "skipped". Other kinds run anywhere strata does. Uses only the Python standard library (run
it with Debian's /usr/bin/python3).
"""
import argparse
import collections
import json
import os
import random
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KINDS = ["kill", "kill0", "stop", "store_garbage", "strangers", "enospc", "ckpt_corrupt",
         "ckpt_mixed", "ckpt_foreign", "linkcut", "slowlink"]
LINK_KINDS = ("linkcut", "slowlink")  # on the emulated cluster
# A rank's first error, or the launcher seeing a rank end: when a fault was detected.
FIRST_ERROR_RX = r"(strata: error: .*(failed|stopped responding)|exited with status|killed by)"
RESTART_RX = r"strata launch: restart \d+ of \d+ after (rank (\d+))?(.*)"
SLOW_LINK_RX = r"slow link: rank (\d+)\b.*? -> rank (\d+)\b"


# ---- the emulated cluster -------------------------------------------------------------------------

# A host of the emulated cluster: its namespace (NIC eth0), its fabric path, and the other end of
# its link (its switch port) in the fabric's namespace.
Host = collections.namedtuple("Host", "ns path fab_ns fab_link")


def emu_cluster_cmd(a):
    """bench/emu_cluster.sh for a job of a.ranks ranks: one rack of a.ranks hosts, one rank each."""
    return ["bash", os.path.join(ROOT, "bench/emu_cluster.sh"), "--racks", "1", "--hosts",
            str(a.ranks), "--host-mbit", str(a.link_mbit)]


def emu_unavailable(a):
    """Why the emulated cluster cannot be made here (None when it can)."""
    if not hasattr(a, "emu_why"):
        r = subprocess.run(emu_cluster_cmd(a) + ["--run", "true"], capture_output=True, text=True)
        a.emu_why = None if r.returncode == 0 else (
            "needs root + netns" if r.returncode == 77 else
            f"emu_cluster.sh failed: {r.stderr.strip().splitlines()[-1:]}")
    return a.emu_why


def ip_netns(ns, *cmd):
    r = subprocess.run(["ip", "netns", "exec", ns] + list(cmd), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"ip netns exec {ns} {' '.join(cmd)}: {r.stderr.strip()}")


def set_link(host, up):
    """Pulls the host's cable (its switch port, the fabric end of its link, goes down: both ends
    lose the carrier) or plugs it back in."""
    ip_netns(host.fab_ns, "ip", "link", "set", host.fab_link, "up" if up else "down")


def shape(host, mbit):
    """The host's NIC, both ways, at `mbit` (tbf as bench/emu_cluster.sh sets it up)."""
    rate = mbit * 1000000 // 8
    burst = max(rate // 100, 131072)  # emu_cluster.sh's: >= rate/HZ, >= one GSO frame
    for ns, dev in ((host.ns, "eth0"), (host.fab_ns, host.fab_link)):
        ip_netns(ns, "tc", "qdisc", "change", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
                 "burst", str(burst), "latency", "200ms")


def remove_netns(prefix):
    """Kills what runs in the namespaces named prefix* and deletes them."""
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for ns in (line.split()[0] for line in names.splitlines() if line.startswith(prefix)):
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout
        for pid in pids.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        subprocess.call(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def children(ppid):
    """Pids of the processes whose parent is ppid."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == ppid:
                        out.append(int(pid))
            except (OSError, ValueError, IndexError):
                pass
    return out


def environ(pid):
    """A process's environment as {bytes: bytes} ({} when it is gone)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
    except OSError:
        return {}


class Job:
    """One `strata launch` of `strata train`, its output read line by line with timestamps. With
    `emu`, the launch runs on an emulated cluster (bench/emu_cluster.sh --launch: a host, a network
    namespace, per rank, linked through shaped veths), its ranks talking TCP across the links."""

    def __init__(self, a, work, tag, extra_env=None, steps=100000, resume=True, mem_ckpt=True,
                 emu=False, train_extra=()):
        self.a = a
        self.emu = emu
        self._launcher = None
        self.work = work
        self.ckpt = os.path.join(work, "ckpt")
        self.metrics = os.path.join(work, "metrics.jsonl")
        self.diag = os.path.join(work, "diag")
        os.makedirs(self.ckpt, exist_ok=True)
        env = dict(os.environ)
        env.update(extra_env or {})
        train = [a.strata, "train", "--data", os.path.join(ROOT, "data/corpus/strata_tales.txt"),
                 "--layers", "2", "--heads", "2", "--dim", "64", "--seq", "32", "--batch", "8",
                 "--threads", "1", "--steps", str(steps), "--zero", "3", "--quiet",
                 "--ckpt-dir", self.ckpt, "--ckpt-every", str(a.ckpt_every), "--keep", "3",
                 "--metrics", self.metrics]
        if a.mem_ckpt and mem_ckpt:
            train += ["--mem-ckpt-every", "1"]
        if resume:
            train.append("--resume")
        train += list(train_extra)
        cmd = [a.strata, "launch", "-n", str(a.ranks), "--max-restarts", str(a.max_restarts),
               "--timeout-ms", str(a.timeout_ms), "--diag-dir", self.diag, "--no-prefix"]
        if extra_env and extra_env.get("STRATA_COMM_TRANSPORT") == "tcp":
            cmd.append("--tcp")
        cmd += ["--"] + train
        if emu:  # each rank enters its host first (emu_enter.sh keeps the launcher's pid)
            cmd = emu_cluster_cmd(a) + [
                "--launch", shlex.join(cmd[:cmd.index("--") + 1]) + ' "$EMU_ENTER" ' +
                shlex.join(train)]
        self.t0 = time.monotonic()
        self.lines = []  # (time since start, text)
        self.lock = threading.Lock()
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, env=env, text=True, errors="replace",
                                  start_new_session=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.tag = tag

    def _read(self):
        for line in self.p.stdout:
            with self.lock:
                self.lines.append((time.monotonic() - self.t0, line.rstrip("\n")))

    def now(self):
        return time.monotonic() - self.t0

    def find(self, pattern, after=0.0):
        """The first output line matching `pattern` logged at or after `after`: (time, match)."""
        rx = re.compile(pattern)
        with self.lock:
            for t, line in self.lines:
                if t >= after:
                    m = rx.search(line)
                    if m:
                        return t, m
        return None

    def wait_for(self, pattern, after, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            hit = self.find(pattern, after)
            if hit:
                return hit
            if self.p.poll() is not None:
                time.sleep(0.2)
                return self.find(pattern, after)
            time.sleep(0.05)
        return None

    def steps(self):
        """(time logged, step) of every metrics line so far; the time is the file's reading time
        for lines that appear while we poll (see progress())."""
        out = []
        try:
            with open(self.metrics) as f:
                for line in f:
                    try:
                        out.append(json.loads(line))
                    except ValueError:
                        pass
        except OSError:
            pass
        return out

    def last_step(self):
        s = self.steps()
        return s[-1]["step"] if s else 0

    def wait_step(self, step, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end and self.p.poll() is None:
            if self.last_step() >= step:
                return True
            time.sleep(0.05)
        return self.last_step() >= step

    def launcher(self):
        """The pid of `strata launch`: our child, or on the emulated cluster the script's."""
        if not self.emu:
            return self.p.pid
        if self._launcher is None:
            for pid in children(self.p.pid):
                try:
                    with open(f"/proc/{pid}/comm") as f:
                        if f.read().strip() == "strata":
                            self._launcher = pid
                except OSError:
                    pass
        return self._launcher

    def ranks(self):
        """{rank: pid} of the launcher's running ranks."""
        out = {}
        for pid in children(self.launcher()) if self.launcher() else []:
            try:
                out[int(environ(pid)[b"RANK"])] = pid
            except (KeyError, ValueError):
                pass
        return out

    def rank_env(self, rank, name):
        pid = self.ranks().get(rank)
        v = environ(pid).get(name.encode()) if pid else None
        return v.decode() if v is not None else None

    def hosts(self):
        """On the emulated cluster, {rank: Host} from its map ($EMU_DIR/ranks)."""
        emu_dir = environ(self.launcher()).get(b"EMU_DIR", b"").decode()
        out = {}
        with open(os.path.join(emu_dir, "ranks")) as f:
            for line in f:
                rank, ns, addr, path, fab_ns, fab_link = line.split()
                out[int(rank)] = Host(ns, path, fab_ns, fab_link)
        return out

    def stop(self, timeout=60):
        """SIGTERM to the launcher (a final checkpoint), then wait; True if it ended in time."""
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            self.p.wait(timeout)
            return True
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            if self.emu:  # the script's own teardown did not run: its namespaces and their ranks
                remove_netns(f"se{self.p.pid}")
            return False

    def output(self):
        with self.lock:
            return "\n".join(l for _, l in self.lines)


# ---- the injections ------------------------------------------------------------------------------

def pick_rank(rng, a, allow0):
    return rng.randrange(0 if allow0 else 1, a.ranks)


def ckpt_steps(job):
    """Committed steps (manifests) in the checkpoint directory, oldest first."""
    steps = []
    for name in os.listdir(job.ckpt):
        m = re.match(r"ckpt_(\d+)\.manifest\.json$", name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def shard(job, step, rank):
    return os.path.join(job.ckpt, f"ckpt_{step:08d}.rank{rank}.safetensors")


def spam_port(host, port, seconds, seed):
    """Garbage, silent connections and an oversized frame on host:port for `seconds`."""
    rng = random.Random(seed)
    held = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            s = socket.create_connection((host, port), timeout=1)
        except OSError:
            time.sleep(0.05)
            continue
        kind = rng.randrange(3)
        try:
            if kind == 0:
                s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
            elif kind == 1:
                s.sendall((64 << 20).to_bytes(4, "little") + b"\x01" * 4096)
        except OSError:
            pass
        held.append(s)  # silent ones (kind 2) and the others stay open
        if len(held) > 200:
            held.pop(0).close()
        time.sleep(0.01)
    for s in held:
        s.close()


def data_ports(job):
    """TCP ports the ranks listen on (their data ports and rank 0's store), from /proc/net/tcp."""
    inodes = {}
    for rank, pid in job.ranks().items():
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes[link[8:-1]] = rank
        except OSError:
            pass
    ports = []
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            cols = line.split()
            if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                ports.append(int(cols[1].split(":")[1], 16))
    return ports


class Result:
    def __init__(self, kind):
        self.kind = kind
        self.injected = self.detected = self.named = self.hangs = self.wrong_ckpt = 0
        self.detect_s, self.recover_s, self.lost = [], [], []
        self.notes = []
        self.skipped = None  # why the kind could not run here
        self.victims = []


def inject(a, kind, rng, job, res, victim):
    """Injects one fault of `kind` into the running job; fills res. Returns when the job has
    recovered (or failed to)."""
    before = job.last_step()
    t_inj = job.now()
    expect_restart = kind not in ("store_garbage", "strangers")
    detect_rx = RESTART_RX
    if kind in ("kill", "kill0"):
        os.kill(job.ranks()[victim], signal.SIGKILL)
    elif kind == "stop":
        os.kill(job.ranks()[victim], signal.SIGSTOP)
    elif kind == "linkcut":
        cut = job.hosts()[victim]
        set_link(cut, up=False)
    elif kind == "store_garbage":
        addr = job.rank_env(0, "STRATA_STORE_ADDR") or "127.0.0.1:" + job.rank_env(0, "MASTER_PORT")
        host, port = addr.rsplit(":", 1)
        spam_port(host, int(port), 4.0, rng.random())
    elif kind == "strangers":
        threads = [threading.Thread(target=spam_port, args=("127.0.0.1", p, 4.0, rng.random()))
                   for p in data_ports(job)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elif kind == "enospc":
        filler = os.path.join(job.ckpt, "filler")
        st = os.statvfs(job.ckpt)
        with open(filler, "wb") as f:
            try:
                f.write(b"\0" * (st.f_bavail * st.f_frsize))
            except OSError:
                pass
    elif kind.startswith("ckpt_"):
        steps = ckpt_steps(job)
        while len(steps) < 2 and job.p.poll() is None:
            time.sleep(0.2)
            steps = ckpt_steps(job)
        newest, older = steps[-1], steps[-2]
        res.notes.append(f"damaged step {newest}")
        if kind == "ckpt_corrupt":
            with open(shard(job, newest, 1), "r+b") as f:
                f.seek(-64, os.SEEK_END)
                f.write(bytes(64))
        elif kind == "ckpt_mixed":
            shutil.copyfile(shard(job, older, 0), shard(job, newest, 0))
        else:
            foreign = os.path.join(a.out, "foreign", "ckpt")
            fsteps = sorted(int(m.group(1)) for m in
                            (re.match(r"ckpt_(\d+)\.rank0\.safetensors$", n)
                             for n in os.listdir(foreign)) if m)
            shutil.copyfile(os.path.join(foreign, f"ckpt_{fsteps[-1]:08d}.rank0.safetensors"),
                            shard(job, newest, 0))
        before = job.last_step()  # the wait for two committed steps took a while
        os.kill(job.ranks()[victim], signal.SIGKILL)
        res.damaged = newest
    res.injected += 1
    if not expect_restart:
        # Survived untouched: no restart line, and training goes on past the injection.
        ok = job.wait_step(before + 20, 60) and not job.find(detect_rx, t_inj)
        res.detected += ok
        res.named += ok
        if not ok:
            res.notes.append("the job restarted or stalled:\n" + job.output()[-2000:])
        return
    if kind == "linkcut":
        # The cable goes back in once the job has noticed, so that the restart finds the host.
        job.wait_for(FIRST_ERROR_RX, t_inj, a.timeout_ms / 1000 * 2 + 30)
        set_link(cut, up=True)
    hit = job.wait_for(detect_rx, t_inj, a.timeout_ms / 1000 * 2 + 30)
    if kind == "enospc":
        try:
            os.unlink(os.path.join(job.ckpt, "filler"))
        except OSError:
            pass
    if not hit:
        res.hangs += 1
        res.notes.append("no restart seen:\n" + job.output()[-2000:])
        return
    t_det, m = hit
    res.detected += 1
    # Detected when the first rank's error names the culprit (or failure), else at the verdict.
    first = job.find(FIRST_ERROR_RX, t_inj)
    res.detect_s.append((first[0] if first and first[0] <= t_det else t_det) - t_inj)
    named = m.group(2)
    if kind in ("enospc",):
        res.named += "No space left" in m.group(0) or "write" in m.group(0) or named is not None
    elif named is not None and int(named) == victim:
        # A cut host cannot reach the store either: every survivor must blame it, not only the
        # verdict (their dumps say whom they blamed).
        wrong = survivors_blaming_others(m.group(0), victim) if kind == "linkcut" else []
        res.named += not wrong
        for w in wrong:
            res.notes.append(f"victim rank {victim}: {w}")
        if kind == "linkcut" and res.detect_s[-1] > 2 * a.timeout_ms / 1000:
            res.notes.append(f"detected after {res.detect_s[-1]:.2f} s, more than twice the "
                             f"timeout")
    else:
        res.notes.append(f"victim rank {victim}, verdict: {m.group(0)}")
    # Recovered: the first metrics line the restarted run writes.
    lines_before = len(job.steps())
    res_hit = job.wait_for(r"strata train: resumed (?:at|from memory) step (\d+)", t_det, 60)
    if not res_hit:
        res.hangs += 1
        res.notes.append("no resume seen:\n" + job.output()[-2000:])
        return
    resumed = int(res_hit[1].group(1))
    if kind.startswith("ckpt_") and resumed == res.damaged:
        res.wrong_ckpt += 1
        res.notes.append(f"resumed at step {resumed}, the damaged step is {res.damaged}")
    elif kind.startswith("ckpt_") and resumed > res.damaged:
        res.notes.append(f"step {resumed} was committed after the damage to step {res.damaged}: "
                         "the check was not exercised this time")
    end = time.monotonic() + 60
    while len(job.steps()) <= lines_before and time.monotonic() < end and job.p.poll() is None:
        time.sleep(0.02)
    if len(job.steps()) <= lines_before:
        res.hangs += 1
        res.notes.append("no step after the resume:\n" + job.output()[-2000:])
        return
    # The restarted run's first step is in metrics; its time is "now" to within the poll.
    res.recover_s.append(job.now() - t_det)
    res.lost.append(max(0, before - resumed))


def survivors_blaming_others(restart_line, victim):
    """What each survivor's dump (in the attempt directory the restart line names) blames, where
    that is not the victim."""
    m = re.search(r"\(dumps: (\S+)\)", restart_line)
    if not m:
        return ["the restart line names no dumps"]
    wrong = []
    for name in os.listdir(m.group(1)):
        d = re.match(r"rank(\d+)\.json$", name)
        if d and int(d.group(1)) != victim:
            with open(os.path.join(m.group(1), name)) as f:
                dump = json.load(f)
            if dump.get("culprit") != victim:
                wrong.append(f"rank {d.group(1)} blamed rank {dump.get('culprit')}: "
                             f"{dump.get('error')}")
    return wrong


def inject_slowlink(a, job, res, victim):
    """Slows the victim host's NIC both ways to a.slow_mbit. The job must flag a link of the
    victim's (rank 0's warning "slow link: rank A (...) -> rank B (...)", the metrics' "slow_link")
    and go on training without a restart; then the rate comes back and the flag must clear. Time to
    detect: to the warning; time to recover: from the rate's return to the first metrics line
    without the flag."""
    host = job.hosts()[victim]
    t_inj = job.now()
    if job.find(SLOW_LINK_RX):
        res.notes.append("a slow link was flagged before any was slowed: "
                         + job.find(SLOW_LINK_RX)[1].group(0))
    before = job.last_step()
    shape(host, a.slow_mbit)
    res.injected += 1
    try:
        hit = job.wait_for(SLOW_LINK_RX + "|" + RESTART_RX, t_inj, a.slow_detect_s)
        if not hit or not hit[1].group(0).startswith("slow link"):
            res.notes.append(f"victim rank {victim}: no slow link flagged within "
                             f"{a.slow_detect_s:.0f} s" + (f"; {hit[1].group(0)}" if hit else ""))
            return
        t_det, m = hit
        res.detected += 1
        res.detect_s.append(t_det - t_inj)
        link = [int(m.group(1)), int(m.group(2))]
        if victim in link:
            res.named += 1
        else:
            res.notes.append(f"victim rank {victim}, flagged: {m.group(0)}")
        # Training goes on: more steps, and the metrics carry the flag.
        if not job.wait_step(job.last_step() + 5, 60):
            res.hangs += 1
            res.notes.append("no steps after the flag:\n" + job.output()[-2000:])
            return
        if not any(r.get("slow_link") == link for r in job.steps()):
            res.notes.append(f"no metrics line carries \"slow_link\": {link}")
    finally:
        shape(host, a.link_mbit)
    t_rest, seen = job.now(), len(job.steps())
    end = time.monotonic() + a.slow_detect_s
    cleared = None
    while cleared is None and time.monotonic() < end and job.p.poll() is None:
        cleared = next((r for r in job.steps()[seen:] if "slow_link" not in r), None)
        time.sleep(0.05)
    if cleared is None:
        res.notes.append(f"the flag did not clear within {a.slow_detect_s:.0f} s of the rate's "
                         f"return")
    else:
        res.recover_s.append(job.now() - t_rest)
    restarted = job.find(RESTART_RX, t_inj)
    if restarted:
        res.notes.append("the job restarted: " + restarted[1].group(0))
    res.lost.append(0 if not restarted else max(0, before - job.last_step()))


def run_kind(a, kind, rng):
    res = Result(kind)
    if kind in LINK_KINDS and emu_unavailable(a):
        res.skipped = emu_unavailable(a)
        return res
    if kind == "slowlink" and a.ranks < 3:
        res.skipped = "needs --ranks 3 or more: a link is judged against other hosts' links"
        return res
    for i in range(a.repeat):
        work = tempfile.mkdtemp(prefix=f"faults-{kind}-", dir=a.out)
        env = {"STRATA_COMM_TRANSPORT": "tcp"} if kind == "strangers" else {}
        mounted = False
        if kind == "enospc":
            ck = os.path.join(work, "ckpt")
            os.makedirs(ck)
            mounted = subprocess.call(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", ck]) == 0
            if not mounted:
                res.notes.append("cannot mount a tmpfs (not root?): enospc skipped")
                shutil.rmtree(work, ignore_errors=True)
                return res
        # The damaged-checkpoint kinds test the disk's checks: no memory copy to resume from.
        job = Job(a, work, kind, env, mem_ckpt=not kind.startswith("ckpt_"),
                  emu=kind in LINK_KINDS,
                  train_extra=["--straggler-window", str(a.link_window)]
                  if kind == "slowlink" else [])
        try:
            if not job.wait_step(a.warm_steps, 120):
                res.notes.append("the job never started:\n" + job.output()[-2000:])
                res.injected += 1
                res.hangs += 1
                continue
            victim = {"kill": pick_rank(rng, a, False), "kill0": 0,
                      "stop": pick_rank(rng, a, True)}.get(kind, pick_rank(rng, a, True))
            res.victims.append(victim)
            if kind == "slowlink":
                inject_slowlink(a, job, res, victim)
            else:
                inject(a, kind, rng, job, res, victim)
        finally:
            if not job.stop():
                res.hangs += 1
                res.notes.append("the launcher did not end after SIGTERM")
            if mounted:
                subprocess.call(["umount", "-l", os.path.join(work, "ckpt")])
            if not a.keep:
                shutil.rmtree(work, ignore_errors=True)
            else:
                with open(os.path.join(work, "output.log"), "w") as f:
                    f.write(job.output() + "\n")
    return res


def fmt_list(xs, unit):
    if not xs:
        return "-"
    return f"{sum(xs) / len(xs):.2f}{unit} (max {max(xs):.2f})"


def report(results):
    print(f"{'fault':14} {'injected':>8} {'detected':>8} {'named':>6} {'hangs':>5} "
          f"{'wrong ckpt':>10}  {'time to detect':>20}  {'time to recover':>20}  steps lost")
    for r in results:
        if r.skipped:
            print(f"{r.kind:14} skipped ({r.skipped})")
            continue
        lost = f"{sum(r.lost) / len(r.lost):.1f} (max {max(r.lost)})" if r.lost else "-"
        print(f"{r.kind:14} {r.injected:8} {r.detected:8} {r.named:6} {r.hangs:5} "
              f"{r.wrong_ckpt:10}  {fmt_list(r.detect_s, ' s'):>20}  "
              f"{fmt_list(r.recover_s, ' s'):>20}  {lost}")
    for r in results:
        if r.kind in LINK_KINDS and r.victims:
            print(f"  [{r.kind}] victims: rank {', '.join(map(str, r.victims))}")
        for n in r.notes:
            print(f"  [{r.kind}] {n}")


def make_foreign(a):
    """A short run of another seed, whose shards the ckpt_foreign kind plants."""
    d = os.path.join(a.out, "foreign")
    os.makedirs(d, exist_ok=True)
    subprocess.check_call([a.strata, "launch", "-n", str(a.ranks), "--no-prefix", "--", a.strata,
                           "train", "--data", os.path.join(ROOT, "data/corpus/strata_tales.txt"),
                           "--layers", "2", "--heads", "2", "--dim", "64", "--seq", "32",
                           "--batch", "8", "--threads", "1", "--steps", "10", "--zero", "3",
                           "--quiet", "--seed", "777", "--ckpt-dir", os.path.join(d, "ckpt")],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def soak(a, rng):
    """One job for a.soak minutes with a fault every a.every seconds (kills and stops of random
    ranks): its effective training time is the wall time less what the faults cost (detection,
    recovery, lost steps recomputed), over the wall time."""
    work = tempfile.mkdtemp(prefix="faults-soak-", dir=a.out)
    job = Job(a, work, "soak")
    results = {k: Result(k) for k in ("kill", "kill0", "stop")}
    wall0 = time.monotonic()
    end = wall0 + a.soak * 60
    job.wait_step(a.warm_steps, 120)
    next_fault = time.monotonic() + a.every
    while time.monotonic() < end and job.p.poll() is None:
        if time.monotonic() >= next_fault:
            kind = rng.choice(list(results))
            victim = 0 if kind == "kill0" else pick_rank(rng, a, kind == "stop")
            inject(a, kind, rng, job, results[kind], victim)
            next_fault = time.monotonic() + a.every
        time.sleep(0.2)
    wall = time.monotonic() - wall0
    job.stop()
    rows = [r for r in job.steps() if "step" in r]
    times = sorted(r.get("step_s") or 0 for r in rows)
    median = times[len(times) // 2] if times else 0
    report(list(results.values()))
    # Time the faults cost: detection, recovery, and the lost steps recomputed at the healthy step
    # time. The machine is shared, so a fault-free run's rate is not a stable yardstick; the time
    # lost to each fault is.
    lost_s = sum(sum(r.detect_s) + sum(r.recover_s) + median * sum(r.lost)
                 for r in results.values())
    faults = sum(r.injected for r in results.values())
    print(f"soak: {a.soak} min, a fault every {a.every} s: {faults} faults cost {lost_s:.1f} s "
          f"(detect + recover + {sum(sum(r.lost) for r in results.values())} lost steps at "
          f"{median * 1e3:.1f} ms) of {wall:.1f} s: effective training time "
          f"{100 * (1 - lost_s / wall):.1f}%")
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strata", default=os.path.join(ROOT, "build/release/strata"))
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--timeout-ms", type=int, default=3000)
    p.add_argument("--max-restarts", type=int, default=100)
    p.add_argument("--ckpt-every", type=int, default=20)
    p.add_argument("--warm-steps", type=int, default=45)
    p.add_argument("--link-mbit", type=int, default=800,
                   help="emulated cluster: every host's NIC, each way")
    p.add_argument("--slow-mbit", type=int, default=10, help="slowlink: the victim's NIC")
    p.add_argument("--link-window", type=int, default=5,
                   help="slowlink: steps per slow-link window (strata train --straggler-window)")
    p.add_argument("--slow-detect-s", type=float, default=120,
                   help="slowlink: how long the flag (and its clearing) may take")
    p.add_argument("--soak", type=float, default=0, help="minutes of one job with periodic faults")
    p.add_argument("--every", type=float, default=120)
    p.add_argument("--out", default=None)
    p.add_argument("--keep", action="store_true",
                   help="keep the jobs' folders (with the job's output in output.log)")
    a = p.parse_args()
    a.strata = os.path.abspath(a.strata)
    help_text = subprocess.run([a.strata, "train", "--help"], capture_output=True, text=True)
    a.mem_ckpt = "--mem-ckpt-every" in help_text.stdout + help_text.stderr
    a.out = a.out or tempfile.mkdtemp(prefix="strata-faults-")
    os.makedirs(a.out, exist_ok=True)
    rng = random.Random(a.seed)
    print(f"strata faults: seed {a.seed}, {a.ranks} ranks, timeout {a.timeout_ms} ms, memory "
          f"checkpoints {'on' if a.mem_ckpt else 'off'}, work in {a.out}", flush=True)
    if a.soak:
        soak(a, rng)
        return
    kinds = a.kinds.split(",")
    for k in kinds:
        if k not in KINDS:
            sys.exit(f"faults: unknown kind '{k}' (known: {', '.join(KINDS)})")
    if "ckpt_foreign" in kinds:
        make_foreign(a)
    results = []
    for k in kinds:
        print(f"-- {k} x {a.repeat}", flush=True)
        results.append(run_kind(a, k, rng))
    report(results)


if __name__ == "__main__":
    main()
