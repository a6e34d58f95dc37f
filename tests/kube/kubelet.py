"""A test kubelet: the one node of the fake API server, running each pod's container under runsc.

For each Pod created in the fake API server (``apiserver.py``) it does what a node with gVisor as its pod
runtime does, with this machine's parts:

- binds the pod to the node, refuses a ``runtimeClassName`` it has no handler for (an event
  ``FailedCreatePodSandBox``, the pod stays Pending), and a volume whose Secret or ConfigMap is missing
  (``FailedMount``);
- materializes the pod's volumes (secret, configMap with ``items``, emptyDir as a sized tmpfs), read-only
  where the pod mounts them so;
- makes the pod's network (``network.PodNetwork``: a namespace, a veth pair, an address) and enforces the
  NetworkPolicies that select the pod on the node's end;
- runs the container's command under ``runsc --network=sandbox`` in that namespace, with an OCI spec built
  by the repo's own ``oci`` module (its users, capabilities, rlimits, read-only root, /proc and /sys), the
  pod's memory limit as the cgroup's; the "image" is this machine's interpreter, bound read-only;
- reports ``podIP``, phase, ``Ready`` after the container's ``tcpSocket`` readiness probe connects, and
  ``containerStatuses`` (``terminated.reason`` ``OOMKilled`` when the memory cgroup killed it);
- on the pod's deletion stops the container, removes its network and folders, and finalizes the pod.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import sys
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cellgate.gate.sandbox.local import oci
from cellgate.gate.sandbox.local.container import python_dirs
from cellgate.gate.sandbox.local.leftovers import delete_sandbox
from cellgate.gate.sandbox.local.oom import OomWatch
from cellgate.gate.sandbox.local.runsc import Runsc

from .apiserver import Store, labels_match, merge_patch, now
from .network import PodNetwork

NODE = "cellgate-test-node"
PROBE_PERIOD = 0.05  # seconds between readiness probes, as a kubelet's periodSeconds


def quantity(value: str | int | None, default: int) -> int:
    """A Kubernetes quantity (``512Mi``, ``1G``, ``268435456``) in bytes."""
    if value is None:
        return default
    text = str(value)
    for suffix, factor in (("Ki", 1 << 10), ("Mi", 1 << 20), ("Gi", 1 << 30), ("k", 10**3), ("M", 10**6),
                           ("G", 10**9)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(text)


@dataclass
class RunningPod:
    namespace: str
    name: str
    uid: str
    root: Path
    sandbox_id: str = field(default_factory=lambda: "cg-" + uuid.uuid4().hex[:12])
    network: PodNetwork | None = None
    process: asyncio.subprocess.Process | None = None
    deleted: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class TestKubelet:
    """Runs pods of ``store`` under ``runsc``; pods' folders under ``root``."""

    __test__ = False  # not a pytest class

    def __init__(self, store: Store, runsc: Runsc, root: Path, runtime_handlers: tuple[str, ...] = ("gvisor",)):
        self.store = store
        self.runsc = runsc
        self.root = root
        self.handlers = runtime_handlers
        self.pods: dict[str, RunningPod] = {}  # by uid
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="test-kubelet", daemon=True)

    def start(self) -> TestKubelet:
        self._thread.start()
        self.store.listeners.append(self._heard)
        return self

    def stop(self) -> None:
        """Stop every pod still running (the end of the node), then the kubelet's loop."""
        self.store.listeners.remove(self._heard)
        asyncio.run_coroutine_threadsafe(self._stop_all(), self.loop).result(120)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _stop_all(self) -> None:
        for pod in list(self.pods.values()):
            pod.deleted.set()
        tasks = [p.task for p in self.pods.values() if p.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    def network_of(self, pod_name: str) -> PodNetwork:
        """The network the kubelet made for a running pod (the test reads the node's address on its link)."""
        found = [p.network for p in list(self.pods.values()) if p.name == pod_name and p.network is not None]
        if not found:
            raise LookupError(f"pod {pod_name} has no network on this node")
        return found[0]

    def _heard(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        if plural == "pods":
            self.loop.call_soon_threadsafe(self._pod_changed, kind, obj)

    def _pod_changed(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        pod = self.pods.get(meta["uid"])
        if kind == "ADDED" and pod is None:
            pod = RunningPod(meta["namespace"], meta["name"], meta["uid"], self.root / meta["uid"])
            self.pods[pod.uid] = pod
            pod.task = self.loop.create_task(self._run(pod, obj))
        elif pod is not None and (kind == "DELETED" or "deletionTimestamp" in meta):
            pod.deleted.set()

    # ------------------------------------------------------------ status
    def _status(self, pod: RunningPod, change: dict[str, Any]) -> None:
        self.store.update("pods", pod.namespace, pod.name, lambda o: {**o, "status": merge_patch(o["status"], change)})

    def event(self, pod: RunningPod, reason: str, message: str, kind: str = "Warning") -> None:
        self.store.create("events", pod.namespace, {
            "metadata": {"name": f"{pod.name}.{uuid.uuid4().hex[:10]}"},
            "involvedObject": {"kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid,
                               "apiVersion": "v1"},
            "reason": reason, "message": message, "type": kind, "source": {"component": "kubelet", "host": NODE},
            "firstTimestamp": now(), "lastTimestamp": now(), "count": 1,
        })

    # ------------------------------------------------------------ a pod's life
    async def _run(self, pod: RunningPod, obj: dict[str, Any]) -> None:
        try:
            await self._live(pod, obj)
        except Exception as exc:  # the node's own failure: said as an event, as a kubelet does
            self.event(pod, "KubeletError", f"{type(exc).__name__}: {exc}")
            await pod.deleted.wait()
        finally:
            await self._teardown(pod)
            self.pods.pop(pod.uid, None)
            self.store.finalize("pods", pod.namespace, pod.name)

    async def _live(self, pod: RunningPod, obj: dict[str, Any]) -> None:
        self.store.update("pods", pod.namespace, pod.name,
                          lambda o: merge_patch(o, {"spec": {"nodeName": NODE}}))
        self._status(pod, {"conditions": [{"type": "PodScheduled", "status": "True"}], "hostIP": "127.0.0.1"})
        spec = obj["spec"]
        handler = spec.get("runtimeClassName")
        if handler not in self.handlers:
            self.event(pod, "FailedCreatePodSandBox",
                       f'Failed to create pod sandbox: RuntimeHandler "{handler}" not supported')
            await pod.deleted.wait()
            return
        try:
            volumes = self._volumes(pod, spec)
        except LookupError as exc:
            self.event(pod, "FailedMount", str(exc))
            await pod.deleted.wait()
            return
        pod.network = await asyncio.to_thread(PodNetwork.create)
        container = spec["containers"][0]
        self._enforce_policies(pod, obj)
        argv = self._bundle(pod, spec, container, volumes)
        with open(pod.root / "runsc.log", "wb") as log:
            pod.process = await asyncio.create_subprocess_exec(
                *argv, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}, cwd=str(pod.root),
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        self._status(pod, {"phase": "Running", "podIP": pod.network.pod_ip, "podIPs": [{"ip": pod.network.pod_ip}],
                           "startTime": now(), "containerStatuses": [{
                               "name": container["name"], "ready": False, "restartCount": 0, "image": container.get(
                                   "image", ""), "imageID": "", "started": True,
                               "state": {"running": {"startedAt": now()}}}]})
        exited = asyncio.ensure_future(pod.process.wait())
        deleted = asyncio.ensure_future(pod.deleted.wait())
        oom: OomWatch | None = None
        probe = container.get("readinessProbe", {}).get("tcpSocket", {}).get("port")
        try:
            if probe is not None:
                ready = asyncio.ensure_future(self._probe(pod.network.pod_ip, int(probe)))
                await asyncio.wait([ready, exited, deleted], return_when=asyncio.FIRST_COMPLETED)
                if not ready.done():
                    ready.cancel()
                elif ready.result():
                    oom = OomWatch(pod.sandbox_id, lambda: None)
                    oom.start(self.loop)
                    self._ready(pod, container["name"], True)
            else:
                self._ready(pod, container["name"], True)
            await asyncio.wait([exited, deleted], return_when=asyncio.FIRST_COMPLETED)
            if exited.done() and not deleted.done():
                code = exited.result()
                # runsc gone, its cgroup is removed: the OOM watch has every signal it will get (``oom``).
                await asyncio.to_thread(delete_sandbox, self.runsc.path, str(pod.root / "state"), pod.sandbox_id)
                reason = "OOMKilled" if oom is not None and oom.hit else ("Completed" if code == 0 else "Error")
                self._status(pod, {"phase": "Succeeded" if code == 0 else "Failed",
                                   "conditions": [{"type": "Ready", "status": "False"}],
                                   "containerStatuses": [{"name": container["name"], "ready": False, "restartCount": 0,
                                                          "image": container.get("image", ""), "imageID": "",
                                                          "state": {"terminated": {"exitCode": code, "reason": reason,
                                                                                   "finishedAt": now()}}}]})
                await deleted
        finally:
            if oom is not None:
                oom.close()
            exited.cancel()
            deleted.cancel()

    def _ready(self, pod: RunningPod, name: str, ready: bool) -> None:
        def change(o: dict[str, Any]) -> dict[str, Any]:
            status = o["status"]
            status["conditions"] = [c for c in status.get("conditions", []) if c["type"] not in ("Ready",
                                                                                                  "ContainersReady")]
            status["conditions"] += [{"type": t, "status": str(ready)} for t in ("ContainersReady", "Ready")]
            for container in status.get("containerStatuses", []):
                if container["name"] == name:
                    container["ready"] = ready
            return o
        self.store.update("pods", pod.namespace, pod.name, change)

    async def _probe(self, ip: str, port: int) -> bool:
        """A tcpSocket readiness probe: connects every ``PROBE_PERIOD`` until the port accepts."""
        while True:
            try:
                _, writer = await asyncio.open_connection(ip, port)
            except OSError:
                await asyncio.sleep(PROBE_PERIOD)  # the probe's period, not a synchronization
                continue
            writer.close()
            return True

    async def _teardown(self, pod: RunningPod) -> None:
        if pod.process is not None:
            await asyncio.to_thread(delete_sandbox, self.runsc.path, str(pod.root / "state"), pod.sandbox_id)
            if pod.process.returncode is None:
                pod.process.kill()
            await pod.process.wait()
        if pod.network is not None:
            await asyncio.to_thread(pod.network.delete)
        await asyncio.to_thread(self._unmount_and_remove, pod.root)

    @staticmethod
    def _unmount_and_remove(root: Path) -> None:
        from cellgate.gate.sandbox.local import mounts
        mounts.unmount_under(root)
        shutil.rmtree(root, ignore_errors=True)

    # ------------------------------------------------------------ volumes, policy, bundle
    def _volumes(self, pod: RunningPod, spec: dict[str, Any]) -> dict[str, tuple[Path, bool]]:
        """Each volume as a host folder: name -> (folder, is a tmpfs the OCI spec mounts itself)."""
        pod_security = spec.get("securityContext", {})
        # As a kubelet does: with an fsGroup, volumes' files are root's and the fsGroup's, else the pod user's.
        fs_group = pod_security.get("fsGroup")
        uid = 0 if fs_group is not None else pod_security.get("runAsUser", oci.SANDBOX_UID)
        gid = fs_group if fs_group is not None else pod_security.get("runAsGroup", uid)
        found: dict[str, tuple[Path, bool]] = {}
        for volume in spec.get("volumes", []):
            folder = pod.root / "volumes" / volume["name"]
            folder.mkdir(parents=True)
            if "emptyDir" in volume:
                found[volume["name"]] = (folder, True)
                continue
            if "secret" in volume:
                source = self.store.get("secrets", pod.namespace, volume["secret"]["secretName"])
                kind, ref = "secret", volume["secret"]
                data = {k: base64.b64decode(v) for k, v in (source or {}).get("data", {}).items()}
                data.update({k: v.encode() for k, v in (source or {}).get("stringData", {}).items()})
                mode = ref.get("defaultMode", 0o644)
            elif "configMap" in volume:
                source = self.store.get("configmaps", pod.namespace, volume["configMap"]["name"])
                kind, ref = "configmap", volume["configMap"]
                data = {k: v.encode() for k, v in (source or {}).get("data", {}).items()}
                mode = ref.get("defaultMode", 0o644)
            else:
                raise LookupError(f"volume {volume['name']!r}: the test kubelet supports secret, configMap and "
                                  "emptyDir volumes only")
            if source is None:
                name = ref.get("secretName") or ref.get("name")
                raise LookupError(f'MountVolume.SetUp failed for volume "{volume["name"]}" : {kind} "{name}" not found')
            items = ref.get("items") or [{"key": k, "path": k} for k in data]
            for item in items:
                target = folder / item["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data[item["key"]])
                target.chmod(item.get("mode", mode))
            for path in [folder, *folder.rglob("*")]:
                os.chown(path, uid, gid)
            found[volume["name"]] = (folder, False)
        return found

    def _enforce_policies(self, pod: RunningPod, obj: dict[str, Any]) -> set[int] | None:
        """Enforce the NetworkPolicies selecting the pod (present at its start); the ingress ports or None."""
        assert pod.network is not None
        labels = obj["metadata"].get("labels") or {}
        policies = [p for p in self.store.select("networkpolicies", pod.namespace)[0]
                    if labels_match(",".join(f"{k}={v}" for k, v in p["spec"].get("podSelector", {}).get(
                        "matchLabels", {}).items()), labels)]
        if not policies:
            return None
        types = {t for p in policies for t in p["spec"].get("policyTypes", ["Ingress"])}
        egress = "Egress" not in types or any(p["spec"].get("egress") for p in policies)
        ports: set[int] | None = None
        if "Ingress" in types:
            ports = {int(port["port"]) for p in policies for rule in p["spec"].get("ingress") or []
                     for port in rule.get("ports") or []}
        pod.network.enforce(ports, egress)
        return ports

    def _bundle(self, pod: RunningPod, spec: dict[str, Any], container: dict[str, Any],
                volumes: dict[str, tuple[Path, bool]]) -> list[str]:
        """Write the pod's OCI bundle (the repo's ``oci`` module, the pod's mounts) and return runsc's argv."""
        assert pod.network is not None
        for part in ("bundle/rootfs", "etc", "state"):
            (pod.root / part).mkdir(parents=True, exist_ok=True)
        for name, text in oci.etc_files().items():
            (pod.root / "etc" / name).write_text(text)
        for link, points_to in oci.rootfs_links().items():
            os.symlink(points_to, pod.root / "bundle" / "rootfs" / link)
        limits_spec = container.get("resources", {}).get("limits", {})
        limits = oci.Limits(memory_bytes=quantity(limits_spec.get("memory"), 1 << 30))
        command = [*container.get("command", []), *container.get("args", [])]
        if Path(command[0]).name.startswith("python"):
            command[0] = sys.executable  # the "image" is this machine's interpreter
        env = {e["name"]: e.get("value", "") for e in container.get("env", [])}
        env["PYTHONPATH"] = ":".join(filter(None, [env.get("PYTHONPATH"), *python_dirs()]))
        layout = oci.Layout(bundle=str(pod.root / "bundle"), etc=str(pod.root / "etc"), ipc="", conn="", tools="",
                            python_dirs=python_dirs())
        runtime = oci.spec(layout, limits, command, [f"{k}={v}" for k, v in sorted(env.items())],
                           sandbox_id=pod.sandbox_id, hostname=pod.name[:63])
        security = container.get("securityContext", {})
        uid = security.get("runAsUser", spec.get("securityContext", {}).get("runAsUser", oci.SANDBOX_UID))
        runtime["process"]["user"] = {"uid": uid, "gid": security.get("runAsGroup", uid)}
        if "fsGroup" in spec.get("securityContext", {}):
            runtime["process"]["user"]["additionalGids"] = [spec["securityContext"]["fsGroup"]]
        runtime["process"]["cwd"] = container.get("workingDir", "/")
        runtime["root"]["readonly"] = bool(security.get("readOnlyRootFilesystem", False))
        # The pod's mounts replace the local sandbox's own (connection, tools, socket folder, workspace, /tmp).
        keep = {"/proc", "/dev", "/sys", "/dev/shm", "/etc", *oci.SYSTEM_DIRS, *python_dirs()}
        mounts = [m for m in runtime["mounts"] if m["destination"] in keep]
        by_name = {v["name"]: v for v in spec.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            folder, is_tmpfs = volumes[mount["name"]]
            if is_tmpfs:
                size = quantity(by_name[mount["name"]]["emptyDir"].get("sizeLimit"), 64 << 20)
                mounts.append({"destination": mount["mountPath"], "type": "tmpfs", "source": "tmpfs",
                               "options": ["nosuid", "nodev", f"size={size}", "mode=1777"]})
            else:
                options = ["rbind", "nosuid", "nodev", "ro" if mount.get("readOnly") else "rw"]
                mounts.append({"destination": mount["mountPath"], "type": "bind", "source": str(folder),
                               "options": options})
        runtime["mounts"] = mounts
        runtime["linux"]["namespaces"] = [
            {"type": "network", "path": pod.network.netns_path} if n["type"] == "network" else n
            for n in runtime["linux"]["namespaces"]]
        (pod.root / "bundle" / "config.json").write_text(json.dumps(runtime, indent=1))
        argv = oci.runsc_argv(self.runsc.path, str(pod.root / "state"), self.runsc.platform,
                              str(pod.root / "bundle"), pod.sandbox_id)
        argv = ["--network=sandbox" if a == "--network=none" else a for a in argv]
        # This runsc tells the root network namespace by /proc/sys/net/core/rmem_default, which newer kernels
        # give every namespace: in a mount namespace of its own, /proc/sys/net is an empty tmpfs.
        hide = "mount -t tmpfs -o size=4k tmpfs /proc/sys/net && exec \"$@\""
        return ["unshare", "--mount", "--propagation", "private",
                "--", "sh", "-c", hide, "runsc", *argv]
