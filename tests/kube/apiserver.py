"""A small stateful Kubernetes API server on localhost, for the Kubernetes backend's tests.

It speaks the real REST and watch protocol (JSON bodies, ``Status`` errors, ``resourceVersion``,
``?watch=true`` as a stream of JSON lines, label and field selectors, strategic/merge patches as
JSON merge) for the kinds the backend uses: pods (and their ``status`` subresource), secrets,
configmaps, events (core/v1) and networkpolicies (networking.k8s.io/v1). What it simulates of a
control plane: object identity (uid, resourceVersion, creationTimestamp), graceful pod deletion (a pod
being deleted keeps a ``deletionTimestamp`` until its kubelet says it stopped) and the garbage collector
(an object whose ``ownerReferences`` name a deleted object goes with it). No admission, no auth, no
scheduler: the one node is the test kubelet (``kubelet.py``), which hears of every change here.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import socket
import threading
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

# plural -> (API path prefix, apiVersion, kind)
KINDS: dict[str, tuple[str, str, str]] = {
    "pods": ("/api/v1", "v1", "Pod"),
    "secrets": ("/api/v1", "v1", "Secret"),
    "configmaps": ("/api/v1", "v1", "ConfigMap"),
    "events": ("/api/v1", "v1", "Event"),
    "networkpolicies": ("/apis/networking.k8s.io/v1", "networking.k8s.io/v1", "NetworkPolicy"),
}
HISTORY = 10_000  # watch events kept to resume from a resourceVersion


def now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status(code: int, reason: str, message: str) -> JSONResponse:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}
    return JSONResponse(body, status_code=code)


def labels_match(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality-based label selectors (``a=b,c!=d,e``), what the backend sends."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key.rstrip("=")) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def fields_match(selector: str | None, obj: dict[str, Any]) -> bool:
    for term in filter(None, (selector or "").split(",")):
        key, value = term.split("=", 1)
        found: Any = obj
        for part in key.rstrip("=").split("."):
            found = found.get(part) if isinstance(found, dict) else None
        if str(found) != value.lstrip("="):
            return False
    return True


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what a strategic merge patch of plain fields amounts to)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Watcher:
    plural: str
    namespace: str | None
    labels: str | None
    fields: str | None
    queue: asyncio.Queue[dict[str, Any] | None]


class Store:
    """The objects, their versions and the watch history; safe to use from any thread."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}  # (plural, namespace, name) -> object
        self.version = itertools.count(1000)
        self.last_version = 999
        self.history: list[tuple[int, str, str, dict[str, Any]]] = []  # (rv, plural, type, object)
        self.watchers: list[Watcher] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.listeners: list[Callable[[str, str, dict[str, Any]], None]] = []  # the kubelet: (plural, type, obj)

    def _emit(self, plural: str, kind: str, obj: dict[str, Any]) -> None:
        rv = int(obj["metadata"]["resourceVersion"])
        snapshot = copy.deepcopy(obj)
        self.history.append((rv, plural, kind, snapshot))
        del self.history[:-HISTORY]
        for watcher in self.watchers:
            if self._watched(watcher, plural, snapshot) and self.loop is not None:
                self.loop.call_soon_threadsafe(watcher.queue.put_nowait, {"type": kind, "object": snapshot})
        for listener in self.listeners:
            listener(plural, kind, copy.deepcopy(snapshot))

    @staticmethod
    def _watched(watcher: Watcher, plural: str, obj: dict[str, Any]) -> bool:
        meta = obj["metadata"]
        return (watcher.plural == plural and watcher.namespace in (None, meta.get("namespace"))
                and labels_match(watcher.labels, meta.get("labels") or {}) and fields_match(watcher.fields, obj))

    def _stamp(self, obj: dict[str, Any]) -> None:
        self.last_version = next(self.version)
        obj["metadata"]["resourceVersion"] = str(self.last_version)

    def create(self, plural: str, namespace: str, obj: dict[str, Any]) -> dict[str, Any]:
        prefix, api_version, kind = KINDS[plural]
        with self.lock:
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            key = (plural, namespace, meta.get("name", ""))
            if key in self.objects:
                raise KeyError(key)
            obj["apiVersion"], obj["kind"] = api_version, kind
            meta.update(namespace=namespace, uid=str(uuid.uuid4()), creationTimestamp=now())
            if plural == "pods":
                obj.setdefault("status", {"phase": "Pending", "conditions": []})
            self._stamp(obj)
            self.objects[key] = obj
            self._emit(plural, "ADDED", obj)
            return copy.deepcopy(obj)

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            found = self.objects.get((plural, namespace, name))
            return copy.deepcopy(found) if found is not None else None

    def select(self, plural: str, namespace: str | None, labels: str | None = None,
             fields: str | None = None) -> tuple[list[dict[str, Any]], int]:
        with self.lock:
            items = [copy.deepcopy(o) for (p, ns, _), o in sorted(self.objects.items())
                     if p == plural and namespace in (None, ns)
                     and labels_match(labels, o["metadata"].get("labels") or {})
                     and fields_match(fields, o)]
            return items, self.last_version

    def update(self, plural: str, namespace: str, name: str,
               change: Callable[[dict[str, Any]], dict[str, Any]]) -> dict[str, Any] | None:
        with self.lock:
            key = (plural, namespace, name)
            if key not in self.objects:
                return None
            obj = change(copy.deepcopy(self.objects[key]))
            self._stamp(obj)
            self.objects[key] = obj
            self._emit(plural, "MODIFIED", obj)
            return copy.deepcopy(obj)

    def delete(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Delete an object; a pod on a node is only marked (its kubelet calls ``finalize`` once it stopped)."""
        with self.lock:
            obj = self.objects.get((plural, namespace, name))
            if obj is None:
                return None
            if plural == "pods" and obj.get("spec", {}).get("nodeName") and obj["status"].get("phase") in (
                    "Pending", "Running"):
                if "deletionTimestamp" in obj["metadata"]:
                    return copy.deepcopy(obj)
                return self.update(plural, namespace, name,
                                   lambda o: merge_patch(o, {"metadata": {"deletionTimestamp": now()}}))
            return self.finalize(plural, namespace, name)

    def finalize(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """Remove an object for good, and (as the garbage collector) whatever it owns."""
        with self.lock:
            obj = self.objects.pop((plural, namespace, name), None)
            if obj is None:
                return None
            self._stamp(obj)
            self._emit(plural, "DELETED", obj)
            uid = obj["metadata"]["uid"]
            owned = [key for key, o in self.objects.items()
                     if any(ref.get("uid") == uid for ref in o["metadata"].get("ownerReferences") or [])]
            for key in owned:
                self.delete(*key)
            return copy.deepcopy(obj)

    def events_since(self, version: int, watcher: Watcher) -> list[dict[str, Any]] | None:
        """Watch events after ``version``; None when the history no longer reaches back that far (410 Gone)."""
        with self.lock:
            if self.history and version < self.history[0][0] - 1:
                return None
            return [{"type": kind, "object": copy.deepcopy(obj)} for rv, plural, kind, obj in self.history
                    if rv > version and self._watched(watcher, plural, obj)]


class FakeApiServer:
    """The API server on a free localhost port, served by uvicorn on its own thread."""

    def __init__(self) -> None:
        self.store = Store()
        self.requests: list[tuple[str, str]] = []  # (method, path), what the backend asked for
        self.fail_next: dict[tuple[str, str], int] = {}  # (method, plural) -> HTTP status to answer once
        routes = []
        for plural, (prefix, _, _) in KINDS.items():
            routes += [
                Route(f"{prefix}/{plural}", self._collection, methods=["GET"]),
                Route(prefix + "/namespaces/{namespace}/" + plural, self._collection,
                      methods=["GET", "POST", "DELETE"]),
                Route(prefix + "/namespaces/{namespace}/" + plural + "/{name}", self._one,
                      methods=["GET", "DELETE", "PATCH", "PUT"]),
            ]
        routes.append(Route("/api/v1/namespaces/{namespace}/pods/{name}/status", self._one,
                            methods=["GET", "PATCH", "PUT"]))
        routes.append(Route("/version", lambda request: JSONResponse({"major": "1", "minor": "34",
                                                                      "gitVersion": "v1.34.0-cellgate-fake"})))
        self.app = Starlette(routes=routes)
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(128)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off",
                                                     timeout_graceful_shutdown=1))
        self._thread = threading.Thread(target=self._run, name="fake-kube-apiserver", daemon=True)

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self.store.loop = loop
        loop.run_until_complete(self._server.serve(sockets=[self.socket]))
        loop.close()

    def start(self) -> FakeApiServer:
        self._thread.start()  # the socket already listens: a client may connect before uvicorn accepts
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        loop = self.store.loop
        if loop is not None:
            for watcher in list(self.store.watchers):
                loop.call_soon_threadsafe(watcher.queue.put_nowait, None)
        self._thread.join(10)
        self.socket.close()

    def kubeconfig(self, namespace: str) -> dict[str, Any]:
        """A kubeconfig that points at this server (written as YAML or JSON for a CLI under test)."""
        return {
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "gate", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "gate", "namespace": namespace}}],
        }

    # ------------------------------------------------------------ handlers
    def _refused(self, request: Request, plural: str) -> Response | None:
        code = self.fail_next.pop((request.method, plural), None)
        return status(code, "InternalError", "injected by the test") if code else None

    @staticmethod
    def _plural(request: Request) -> str:
        parts = request.url.path.split("/")
        return parts[-1] if "name" not in request.path_params else (
            "pods" if parts[-1] == "status" else parts[-2])

    async def _collection(self, request: Request) -> Response:
        plural = self._plural(request)
        self.requests.append((request.method, request.url.path))
        namespace = request.path_params.get("namespace")
        query = request.query_params
        if (refused := self._refused(request, plural)) is not None:
            return refused
        if request.method == "POST":
            assert namespace is not None
            body = await request.json()
            try:
                created = self.store.create(plural, namespace, body)
            except KeyError:
                name = body.get("metadata", {}).get("name")
                return status(409, "AlreadyExists", f'{plural} "{name}" already exists')
            return JSONResponse(created, status_code=201)
        if request.method == "DELETE":  # deletecollection
            items, _ = self.store.select(plural, namespace, query.get("labelSelector"), query.get("fieldSelector"))
            for item in items:
                self.store.delete(plural, item["metadata"]["namespace"], item["metadata"]["name"])
            return JSONResponse({"kind": "Status", "apiVersion": "v1", "status": "Success", "metadata": {}})
        if query.get("watch") in ("true", "1"):
            return self._watch(plural, namespace, query.get("labelSelector"), query.get("fieldSelector"),
                               query.get("resourceVersion"))
        items, version = self.store.select(plural, namespace, query.get("labelSelector"), query.get("fieldSelector"))
        _, api_version, kind = KINDS[plural]
        return JSONResponse({"kind": kind + "List", "apiVersion": api_version,
                             "metadata": {"resourceVersion": str(version)}, "items": items})

    def _watch(self, plural: str, namespace: str | None, labels: str | None, fields: str | None,
               version: str | None) -> Response:
        watcher = Watcher(plural, namespace, labels, fields, asyncio.Queue())
        store = self.store
        with store.lock:
            if version and version != "0":
                backlog = store.events_since(int(version), watcher)
                if backlog is None:
                    return status(410, "Expired", f"too old resource version: {version}")
            else:  # no version: the current objects as ADDED, then what changes
                backlog = [{"type": "ADDED", "object": o} for o in store.select(plural, namespace, labels, fields)[0]]
            store.watchers.append(watcher)

        async def lines() -> AsyncIterator[bytes]:
            try:
                for past in backlog:
                    yield json.dumps(past).encode() + b"\n"
                while (event := await watcher.queue.get()) is not None:
                    yield json.dumps(event).encode() + b"\n"
            finally:
                with store.lock:
                    store.watchers.remove(watcher)

        return StreamingResponse(lines(), media_type="application/json")

    async def _one(self, request: Request) -> Response:
        plural = self._plural(request)
        self.requests.append((request.method, request.url.path))
        namespace, name = request.path_params["namespace"], request.path_params["name"]
        if (refused := self._refused(request, plural)) is not None:
            return refused
        missing = status(404, "NotFound", f'{plural} "{name}" not found')
        if request.method == "GET":
            found = self.store.get(plural, namespace, name)
            return JSONResponse(found) if found is not None else missing
        if request.method == "DELETE":
            deleted = self.store.delete(plural, namespace, name)
            return JSONResponse(deleted) if deleted is not None else missing
        body = await request.json()
        is_status = request.url.path.endswith("/status")

        def change(obj: dict[str, Any]) -> dict[str, Any]:
            if request.method == "PUT":
                return {**body, "metadata": obj["metadata"]} if not is_status else {**obj, "status": body["status"]}
            if is_status:
                return {**obj, "status": merge_patch(obj.get("status"), body.get("status", {}))}
            patched: dict[str, Any] = merge_patch(obj, {k: v for k, v in body.items() if k != "status"})
            return patched

        updated = self.store.update(plural, namespace, name, change)
        return JSONResponse(updated) if updated is not None else missing
