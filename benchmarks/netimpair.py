"""An impaired network link for ``bench_browser.py --impair``: netem in user space.

This machine's kernel has no ``sch_netem`` (``tc qdisc add ... netem`` answers "Specified qdisc
kind is unknown"), so the link is built from two TUN devices and a relay thread:

* a network namespace ``omni-imp-<pid>`` (``ip netns add``), where the benchmark's servers run
  (``ip netns exec``); its only non-loopback interface is a TUN device with ``10.231.7.2``,
  routed to ``10.231.7.1`` and nothing else (no default route: nothing can leave the machine);
* in the host namespace a second TUN device with ``10.231.7.1``, routed to ``10.231.7.2``:
  Chromium reaches the servers at ``http://10.231.7.2:<port>/`` and WebRTC's ICE pairs the two
  addresses;
* the relay reads IP packets from either TUN device and writes them to the other one after a
  delay of ``delay_ms`` plus a uniform ``0..jitter_ms`` drawn per packet (packets may overtake
  each other, as with netem's jitter), dropping a share ``loss`` of them, independently in each
  direction.

Root is needed (``ip netns``, TUN devices). Everything is removed by :meth:`ImpairedLink.stop`.
"""

from __future__ import annotations

import fcntl
import heapq
import os
import random
import select
import struct
import subprocess
import threading
import time
from typing import Any

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _open_tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


class ImpairedLink:
    """The namespace, the two TUN devices and the relay (see the module docstring).

    Args:
        delay_ms: fixed one-way delay, each direction.
        jitter_ms: + uniform ``0..jitter_ms`` per packet.
        loss: share of packets dropped, each direction.
        seed: random seed (reproducible impairment).
    """

    host_ip = "10.231.7.1"
    server_ip = "10.231.7.2"

    def __init__(self, *, delay_ms: float = 20.0, jitter_ms: float = 40.0, loss: float = 0.02, seed: int = 7) -> None:
        self.delay_s = delay_ms / 1000.0
        self.jitter_s = jitter_ms / 1000.0
        self.loss = loss
        self._rng = random.Random(seed)
        tag = os.getpid() % 100000
        self.netns = f"omni-imp-{tag}"
        self._host_dev, self._ns_dev = f"oih{tag}", f"oin{tag}"
        self._fds: tuple[int, int] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.counts = {"to_server": 0, "to_server_dropped": 0, "to_host": 0, "to_host_dropped": 0}

    @property
    def exec_prefix(self) -> list[str]:
        """Command prefix that runs a process inside the namespace."""
        return ["ip", "netns", "exec", self.netns]

    def describe(self) -> dict[str, Any]:
        """What the link does, for the result file."""
        return {"how": "user-space relay between two TUN devices (no sch_netem in this kernel); server in a "
                       "network namespace", "netns": self.netns, "server_ip": self.server_ip, "host_ip": self.host_ip,
                "delay_ms": self.delay_s * 1000, "jitter_ms_uniform": self.jitter_s * 1000, "loss_each_way": self.loss,
                "packets": dict(self.counts)}

    def start(self) -> None:
        """Create the namespace and the devices, start the relay."""
        _ip("netns", "add", self.netns)
        try:
            host_fd = _open_tun(self._host_dev)
            ns_fd = _open_tun(self._ns_dev)
            self._fds = (host_fd, ns_fd)
            _ip("link", "set", self._ns_dev, "netns", self.netns)
            _ip("addr", "add", self.host_ip, "peer", self.server_ip, "dev", self._host_dev)
            _ip("link", "set", self._host_dev, "up")
            _ip("-n", self.netns, "link", "set", "lo", "up")
            _ip("-n", self.netns, "addr", "add", self.server_ip, "peer", self.host_ip, "dev", self._ns_dev)
            _ip("-n", self.netns, "link", "set", self._ns_dev, "up")
        except Exception:
            self.stop()
            raise
        self._thread = threading.Thread(target=self._relay, name="netimpair", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        assert self._fds is not None
        host_fd, ns_fd = self._fds
        other = {host_fd: ns_fd, ns_fd: host_fd}
        key = {host_fd: "to_server", ns_fd: "to_host"}
        due: list[tuple[float, int, int, bytes]] = []  # (time, seq, fd to write, packet)
        seq = 0
        while not self._stop.is_set():
            timeout = 0.05 if not due else max(0.0, min(0.05, due[0][0] - time.monotonic()))
            readable, _, _ = select.select([host_fd, ns_fd], [], [], timeout)
            now = time.monotonic()
            for fd in readable:
                while True:
                    try:
                        pkt = os.read(fd, 65535)
                    except BlockingIOError:
                        break
                    except OSError:
                        return
                    k = key[fd]
                    self.counts[k] += 1
                    if self._rng.random() < self.loss:
                        self.counts[k + "_dropped"] += 1
                        continue
                    seq += 1
                    heapq.heappush(due, (now + self.delay_s + self._rng.random() * self.jitter_s, seq, other[fd], pkt))
            now = time.monotonic()
            while due and due[0][0] <= now:
                _, _, fd, pkt = heapq.heappop(due)
                try:
                    os.write(fd, pkt)
                except OSError:
                    pass

    def stop(self) -> None:
        """Stop the relay, close the devices, delete the namespace (run the servers' stop first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2.0)
        if self._fds is not None:
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds = None
        subprocess.run(["ip", "netns", "del", self.netns], check=False, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
