"""``cellgate image``: build, list, show, remove and collect sandbox images (``sandbox.images``)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from cellgate.gate._errors import ConfigError
from cellgate.gate._terminal import clean

SPEC_FILE = "cellgate-image.toml"


def _spec_file(given: str | None) -> Path | None:
    if given:
        return Path(given)
    default = Path(SPEC_FILE)
    return default if default.is_file() else None


def _size(size: int) -> str:
    return f"{size / (1 << 20):.0f} MB"


def add_image(sub: Any) -> None:
    p = sub.add_parser("image", help="build and manage sandbox images ([sandbox] image = NAME)")
    actions = p.add_subparsers(dest="action", required=True)
    build = actions.add_parser("build", help="build an image from a built-in profile (minimal, data) or a spec file; "
                                             "a no-op when the same spec is built")
    build.add_argument("name", help="the image: a built-in profile or an [images.NAME] table of the spec file")
    build.add_argument("--spec", metavar="FILE", help=f"a spec file of [images.NAME] tables (default: ./{SPEC_FILE} "
                                                      "if there is one)")
    build.add_argument("--force", action="store_true", help="build again even if this spec is built")
    listing = actions.add_parser("list", help="the built images, with their names and digests")
    listing.add_argument("--json", action="store_true", help="one JSON object per image")
    show = actions.add_parser("show", help="one image: its spec, locked Python packages and Debian packages")
    show.add_argument("name", help="a name, or sha256:DIGEST")
    show.add_argument("--json", action="store_true", help="the whole manifest as JSON")
    remove = actions.add_parser("rm", help="remove a name (the image itself goes with gc)")
    remove.add_argument("name", help="the image's name, as `cellgate image list` prints it")
    actions.add_parser("gc", help="delete images no name points at, and what a crashed build left")
    docker = actions.add_parser("dockerfile", help="write a built image as a container build context (Dockerfile, "
                                                   "its lock, the kernel slice) for Kubernetes kernel pods")
    docker.add_argument("name", help="a built image: a name, or sha256:DIGEST")
    docker.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder for the build context")

    def run(a: argparse.Namespace) -> int:
        from cellgate.gate.sandbox.images import build as builder
        from cellgate.gate.sandbox.images import store
        from cellgate.gate.sandbox.images.spec import find_spec

        if a.action == "build":
            spec = find_spec(a.name, _spec_file(a.spec))
            image, built = builder.build(spec, log=lambda line: print(f"  {line}", file=sys.stderr), force=a.force)
            if built:
                print(f"built {spec.name} sha256:{image.digest} ({_size(image.manifest['size_bytes'])}, "
                      f"{len(image.manifest['python_packages'])} Python packages, "
                      f"{image.manifest['build_seconds']} s) in {image.folder.parent}")
            else:
                print(f"{spec.name} is up to date: sha256:{image.digest} (built {image.manifest['built_at']}; "
                      "--force builds it again)")
        elif a.action == "list":
            for where, name, image in store.listing():
                row = {"name": name, "digest": f"sha256:{image.digest}", "size_bytes": image.manifest["size_bytes"],
                       "python_packages": len(image.manifest["python_packages"]),
                       "built_at": image.manifest["built_at"], "store": str(where)}
                if a.json:
                    print(json.dumps(row))
                else:
                    print(clean(f"{name or '(no name)':<16} sha256:{image.digest[:16]}  {_size(row['size_bytes']):>7}  "
                                f"{row['python_packages']:>3} Python packages  built {row['built_at']}  {where}"))
        elif a.action == "show":
            image = store.resolve(a.name)
            if a.json:
                print(json.dumps(image.manifest, indent=1))
                return 0
            manifest = image.manifest
            print(clean(f"{image.name} sha256:{image.digest} in {image.folder}"))
            print(clean(f"spec: {json.dumps(manifest['spec'])}"))
            print(f"python {manifest['python_version']}, debian {manifest['debian']['suite']} "
                  f"({len(manifest['debian']['packages'])} packages), {_size(manifest['size_bytes'])}")
            for package in manifest["python_packages"]:
                print(clean(f"  {package['name']}=={package['version']}  sha256:{package['sha256']}"))
        elif a.action == "dockerfile":
            from cellgate.gate.sandbox.images.dockerfile import write_context

            image = store.resolve(a.name)
            try:
                written = write_context(image, Path(a.out))
            except FileExistsError as exc:
                raise ConfigError(str(exc)) from None
            print(f"wrote {', '.join(str(p) for p in written)}: `docker build -t cellgate-kernel-{image.name}:"
                  f"{image.digest[:12]} {a.out}`, then [kubernetes] image = that tag")
        elif a.action == "rm":
            store.remove(a.name)
            print(f"removed the name {a.name}; `cellgate image gc` deletes images no name points at")
        else:
            removed = store.gc()
            print(f"deleted {len(removed)}: {', '.join(removed)}" if removed else "nothing to delete")
        return 0

    p.set_defaults(run=run)
