"""Which packages a build ships (the rest of the metadata is in pyproject.toml).

The top-level folders training/, export/ and service/ install as attnserve.training,
attnserve.export and attnserve.service, so nothing of ours lands at the top of
site-packages. `ATTNSERVE_WHEEL=serve` builds the serving wheel: attnserve.service and
the two commands that serve and call it, nothing that needs torch.
"""

from __future__ import annotations

import os

from setuptools import find_packages, setup

SERVING_ONLY = os.environ.get("ATTNSERVE_WHEEL", "full") == "serve"
STAGES = ["service"] if SERVING_ONLY else ["training", "export", "service"]

# attnserve itself is a namespace package: it has no folder, only the stages below it.
packages: list[str] = []
package_dir: dict[str, str] = {}
for stage in STAGES:
    package_dir[f"attnserve.{stage}"] = stage
    packages += [f"attnserve.{stage}"] + [f"attnserve.{stage}.{sub}" for sub in find_packages(stage)]

scripts = {
    "attnserve-serve": "attnserve.service.cli:serve_main",
    "attnserve-client": "attnserve.service.client.cli:main",
}
if not SERVING_ONLY:
    scripts |= {
        "attnserve-train": "attnserve.training.cli:main",
        "attnserve-export": "attnserve.export.cli:main",
    }

setup(
    packages=packages,
    package_dir=package_dir,
    entry_points={"console_scripts": [f"{name} = {target}" for name, target in scripts.items()]},
)
