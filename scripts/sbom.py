#!/usr/bin/env python3
"""CycloneDX 1.5 SBOM of CashCode from Cargo.lock and `cargo metadata`: one component per package
of the lock file (the root crate is the SBOM's subject), with version, purl, licence, source and
checksum. Deterministic: no timestamp or serial number beyond what the inputs fix.

  python3 scripts/sbom.py OUT.json        write the SBOM
  python3 scripts/sbom.py --check OUT.json  check its components equal Cargo.lock's packages
"""
import json
import subprocess
import sys
try:
    import tomllib  # Python 3.11+
except ModuleNotFoundError:  # Ubuntu 22.04's 3.10: Cargo.lock's flat [[package]] tables suffice
    tomllib = None
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"


def lock_packages():
    text = (ROOT / "Cargo.lock").read_text()
    if tomllib is not None:
        return tomllib.loads(text)["package"]
    # Cargo writes each package as `[[package]]` followed by `key = "string"` lines and a
    # `dependencies = [...]` list; only the string keys are read here.
    packages = []
    for block in text.split("[[package]]")[1:]:
        pkg = {}
        for line in block.splitlines():
            key, sep, value = line.partition(" = ")
            if sep and value.startswith('"') and value.endswith('"'):
                pkg[key.strip()] = value[1:-1]
        packages.append(pkg)
    return packages


def ref(name, version):
    return f"pkg:cargo/{name}@{version}"


def generate(out):
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--all-features"],
            cwd=ROOT, check=True, capture_output=True, text=True,
        ).stdout
    )
    by_id = {(p["name"], p["version"]): p for p in meta["packages"]}
    root_name = meta["packages"][[p["id"] for p in meta["packages"]].index(meta["resolve"]["root"])]["name"]
    lock = lock_packages()
    components, deps = [], []
    root = None
    for pkg in sorted(lock, key=lambda p: (p["name"], p["version"])):
        m = by_id.get((pkg["name"], pkg["version"]), {})
        c = {"type": "library", "bom-ref": ref(pkg["name"], pkg["version"]), "name": pkg["name"],
             "version": pkg["version"], "purl": ref(pkg["name"], pkg["version"])}
        if m.get("description"):
            c["description"] = " ".join(m["description"].split())
        if m.get("license"):
            c["licenses"] = [{"expression": m["license"]}]
        if pkg.get("checksum"):
            c["hashes"] = [{"alg": "SHA-256", "content": pkg["checksum"]}]
        source = pkg.get("source")
        if source == CRATES_IO:
            c["externalReferences"] = [{"type": "distribution",
                                        "url": f"https://crates.io/api/v1/crates/{pkg['name']}/{pkg['version']}/download"}]
        elif source is None:
            c["properties"] = [{"name": "cargo:source", "value": "path (vendored in this repository)"}]
        deps.append({"ref": c["bom-ref"], "dependsOn": sorted(
            ref(*d.split(" ")[:2]) if " " in d else ref(d, only_version(lock, d)) for d in pkg.get("dependencies", []))})
        if pkg["name"] == root_name and source is None and root is None:
            c["type"] = "application"
            c.pop("properties")
            root = c
        else:
            components.append(c)
    name_version = f"{root['name']}@{root['version']}"
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        # Stable for one lock file: a name-based UUID of its text.
        "serialNumber": "urn:uuid:" + str(uuid.uuid5(uuid.NAMESPACE_URL, name_version + (ROOT / "Cargo.lock").read_text())),
        "version": 1,
        "metadata": {"component": root, "tools": [{"name": "scripts/sbom.py"}]},
        "components": components,
        "dependencies": deps,
    }
    Path(out).write_text(json.dumps(bom, indent=2, sort_keys=True) + "\n")


def only_version(lock, name):
    versions = [p["version"] for p in lock if p["name"] == name]
    assert len(versions) == 1, f"{name}: ambiguous dependency {versions}"
    return versions[0]


def check(path):
    bom = json.loads(Path(path).read_text())
    listed = [(c["name"], c["version"]) for c in bom["components"]]
    listed.append((bom["metadata"]["component"]["name"], bom["metadata"]["component"]["version"]))
    locked = [(p["name"], p["version"]) for p in lock_packages()]
    if sorted(listed) != sorted(locked):
        missing = sorted(set(locked) - set(listed))
        extra = sorted(set(listed) - set(locked))
        sys.exit(f"sbom: components differ from Cargo.lock: missing {missing}, extra {extra}")
    print(f"sbom: {len(bom['components'])} components + {bom['metadata']['component']['name']} "
          f"= the {len(locked)} packages of Cargo.lock")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        check(sys.argv[2])
    elif len(sys.argv) == 2:
        generate(sys.argv[1])
    else:
        sys.exit(__doc__)
