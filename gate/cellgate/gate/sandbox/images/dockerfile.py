"""A built image as a container build context, for the Kubernetes backend's kernel pods (deploy/kubernetes).

The same Debian packages and exactly the same wheels (the image's lock, installed ``--require-hashes``) as the
local image, and the same kernel slice: a pod's kernel imports what a local sandbox of that image imports. The
context holds everything it needs (Dockerfile, requirements.lock, the kernel slice), nothing of the gate.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Final

from cellgate.gate.sandbox.images.store import Image

SANDBOX_UID: Final = 1000  # the local sandbox's and the pod's user (deploy/kubernetes/Dockerfile)

TEMPLATE: Final = """\
# Rendered by `cellgate image dockerfile {name}` from the image {name} sha256:{digest}:
# its Debian packages and its locked wheels (by sha256), and the kernel slice; no gate code, no credential.
#
#   docker build -t cellgate-kernel-{name}:{short} {context}
FROM debian:{suite}-slim AS wheels
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-pip \\
    && rm -rf /var/lib/apt/lists/*
COPY requirements.lock /requirements.lock
RUN python3 -m pip install --no-cache-dir --break-system-packages --no-deps --require-hashes --only-binary=:all: \\
    --target /site -r /requirements.lock

FROM debian:{suite}-slim
# The folders the pod mounts exist, so that the read-only root filesystem needs no new mount points.
RUN apt-get update && apt-get install -y --no-install-recommends {packages} \\
    && rm -rf /var/lib/apt/lists/* \\
    && groupadd --gid {uid} sandbox \\
    && useradd --uid {uid} --gid {uid} --home-dir /workspace --no-create-home --shell /usr/sbin/nologin sandbox \\
    && mkdir -p /workspace /opt/cellgate/tools /run/cellgate/conn \\
    && chown {uid}:{uid} /workspace
COPY --from=wheels /site {site}
COPY cellgate/kernel {site}/cellgate/kernel
ENV PYTHONDONTWRITEBYTECODE=1
USER {uid}:{uid}
WORKDIR /workspace
# The pod gives the whole command (cellgate.extensions.kubernetes.manifests.kernel_argv).
CMD ["python3", "-m", "cellgate.kernel"]
"""


def lock_text(image: Image) -> str:
    return "".join(f"{p['name']}=={p['version']} --hash=sha256:{p['sha256']}\n"
                   for p in image.manifest["python_packages"])


def render(image: Image, context: str = ".") -> str:
    """The Dockerfile of ``image``'s kernel container (``python-is-python3``: the pod runs ``python``)."""
    spec = image.manifest["spec"]
    packages = ["python3", "libstdc++6", "python-is-python3",
                *(name for name in spec.get("debian", []) if name not in ("python3", "libstdc++6"))]
    version = image.manifest["python_version"]
    return TEMPLATE.format(name=image.name, digest=image.digest, short=image.digest[:12], context=context,
                           suite=image.manifest["debian"]["suite"], packages=" ".join(packages), uid=SANDBOX_UID,
                           site=f"/usr/local/lib/python{version}/dist-packages")


def write_context(image: Image, folder: Path) -> list[Path]:
    """Write the build context into ``folder`` (a new or empty folder); returns what it wrote."""
    folder.mkdir(parents=True, exist_ok=True)
    if any(folder.iterdir()):
        raise FileExistsError(f"{folder} is not empty: give a new folder for the image's build context")
    (folder / "Dockerfile").write_text(render(image, str(folder)))
    (folder / "requirements.lock").write_text(lock_text(image))
    kernel = image.rootfs / f"usr/local/lib/python{image.manifest['python_version']}/dist-packages/cellgate/kernel"
    shutil.copytree(kernel, folder / "cellgate" / "kernel", ignore=shutil.ignore_patterns("__pycache__"))
    for path in (folder / "cellgate").rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the image's own copy is read-only
    return [folder / "Dockerfile", folder / "requirements.lock", folder / "cellgate" / "kernel"]
