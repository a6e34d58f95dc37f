"""A pod's network as a CNI plugin would make it: its own namespace, a veth pair, an address, a policy.

Needs root, ``ip`` (iproute2) and ``nft`` (nftables). Each pod gets a network namespace with one end of
a veth pair (the pod's address, a default route through the node) and the node keeps the other end (the
node's address on that link: where the gate is, seen from the pod). A NetworkPolicy is enforced on the
node's end, as Calico and Cilium do: a table of its own per pod in the node's nftables.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import secrets
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

# Each pod's link is a /30 of this range. Every fake cluster on the machine (each pytest-xdist worker's, other
# runs') takes one that no interface of the host has, under one lock, so no two pods share a subnet.
POD_LINKS = ipaddress.ip_network("10.246.0.0/16")
_LOCK = Path(tempfile.gettempdir()) / "cellgate-test-pod-links.lock"


@contextmanager
def _links_locked() -> Iterator[None]:
    with _LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        yield


def _free_link() -> ipaddress.IPv4Network:
    """A /30 of POD_LINKS that no interface of the host has an address in (call it with the lock held)."""
    shown = json.loads(subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True,
                                      timeout=30, check=True).stdout or "[]")
    used = {ipaddress.ip_address(a["local"]) for link in shown for a in link.get("addr_info", []) if "local" in a}
    for link in POD_LINKS.subnets(new_prefix=30):
        if not any(address in link for address in used):
            return link
    raise RuntimeError(f"every /30 of {POD_LINKS} is in use on this host: delete the leftover cgk* links "
                       "(ip link del NAME) of fake clusters that did not stop")


def run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


@dataclass
class PodNetwork:
    netns: str
    node_if: str
    node_ip: str
    pod_ip: str

    @property
    def netns_path(self) -> str:
        return f"/run/netns/{self.netns}"

    @classmethod
    def create(cls) -> PodNetwork:
        tag = secrets.token_hex(3)
        pod_if = f"cgk{tag}p"
        with _links_locked():  # the node's address on the link claims its /30
            link = _free_link()
            node_ip, pod_ip = (str(host) for host in link.hosts())
            net = cls(f"cgk-{tag}", f"cgk{tag}n", node_ip, pod_ip)
            run("ip", "netns", "add", net.netns)
            try:
                run("ip", "link", "add", net.node_if, "type", "veth", "peer", "name", pod_if, "netns", net.netns)
                run("ip", "addr", "add", f"{net.node_ip}/30", "dev", net.node_if)
            except BaseException:
                net.delete()
                raise
        try:
            run("ip", "link", "set", net.node_if, "up")
            run("ip", "-n", net.netns, "addr", "add", f"{net.pod_ip}/30", "dev", pod_if)
            run("ip", "-n", net.netns, "link", "set", pod_if, "up")
            run("ip", "-n", net.netns, "link", "set", "lo", "up")
            run("ip", "-n", net.netns, "route", "add", "default", "via", net.node_ip)
        except BaseException:
            net.delete()
            raise
        return net

    @property
    def table(self) -> str:
        return f"cellgate_{self.netns.replace('-', '_')}"

    def enforce(self, ingress_ports: Iterable[int] | None, egress: bool) -> None:
        """The pod's NetworkPolicy on the node's end: ``ingress_ports`` only (None: any), egress or none.

        Traffic from the pod that answers a connection made to it (conntrack: established) always passes.
        """
        rules = [f"table inet {self.table} {{"]
        if not egress:  # on the way in from the pod, before routing: to the node and past it alike
            rules += ["  chain from_pod { type filter hook prerouting priority -10;",
                      f'    iifname "{self.node_if}" ct state established,related accept',
                      f'    iifname "{self.node_if}" meta l4proto tcp reject with tcp reset',
                      f'    iifname "{self.node_if}" reject with icmpx type admin-prohibited', '  }']
        if ingress_ports is not None:
            ports = ", ".join(str(p) for p in sorted(set(ingress_ports))) or "0"
            rules += ["  chain to_pod { type filter hook output priority -10;",
                      f'    oifname "{self.node_if}" ct state established,related accept',
                      f'    oifname "{self.node_if}" tcp dport {{ {ports} }} accept',
                      f'    oifname "{self.node_if}" meta l4proto tcp reject with tcp reset',
                      f'    oifname "{self.node_if}" reject with icmpx type admin-prohibited', '  }']
        rules.append("}")
        done = subprocess.run(["nft", "-f", "-"], input="\n".join(rules), text=True, capture_output=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"nft refused the pod's policy: {done.stderr.strip()}")

    def delete(self) -> None:
        subprocess.run(["nft", "delete", "table", "inet", self.table], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", self.node_if], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.netns], capture_output=True, timeout=30)
