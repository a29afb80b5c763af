"""The integrity digest a variant's metadata.json records, as `kernels` verifies it.

Since kernels 0.19, loading a variant hashes its files and compares them with
metadata.json's "digest"; a variant without one loads with the warning "the metadata does
not record a digest, so its integrity cannot be verified", and one whose files differ does
not load. kernel-builder writes the digest after installing a variant (`kernel-builder hash`,
kernel-builder/src/hash.rs); both use `Digest::hash_variant` of the kernels-data crate
(kernels-data/src/digest.rs), which `kernels` exposes as `kernels._rust.Digest.hash_variant`.
This is the same computation with the standard library only, so that scripts/build.py
needs nothing beyond the torch it builds against:

- every regular file under the variant directory, at any depth (symbolic links followed),
  except metadata.json and metadata.json.sigstore at the top level (the digest lives in the
  first; the second is its detached signature), anything inside a `__pycache__` directory,
  and any `*.pyc` file;
- each keyed by its path relative to the variant directory with `/` separators, valued by
  the standard base64 (with padding) of the SHA-256 of its bytes;
- recorded as {"algorithm": "sha256", "files": {path: hash, ...}}, paths sorted.

tests/test_release.py holds this to kernels' own `Digest.hash_variant` under each kernels
release it is run with, and checks that a changed, added or removed file is detected.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

ALGORITHM = "sha256"
# Files at the top of a variant that the digest leaves out: it is stored in the first, and
# the second is the first's signature.
UNHASHED_TOP = ("metadata.json", "metadata.json.sigstore")


def hashed_files(variant: Path) -> list:
    """The files the digest covers, as paths relative to `variant`, sorted.

    Args:
        variant: a variant directory (build/<variant>/).
    Returns:
        Relative POSIX paths.
    Raises:
        NotADirectoryError: `variant` is not a directory.
    """
    variant = Path(variant)
    if not variant.is_dir():
        raise NotADirectoryError(f"variant: {variant} is not a directory")
    found = []
    # followlinks=False: like walkdir's default, a linked directory is listed but not
    # entered; a link to a file counts as that file (its target is read).
    for top, dirs, files in os.walk(variant):
        rel_top = Path(top).relative_to(variant)
        for name in dirs + files:
            path = Path(top) / name
            rel = (rel_top / name).as_posix()
            if not path.is_file():
                continue
            if rel in UNHASHED_TOP or "__pycache__" in rel.split("/") or path.suffix == ".pyc":
                continue
            found.append(rel)
    return sorted(found)


def variant_digest(variant: Path) -> dict:
    """The digest of a variant's files, in metadata.json's form.

    Args:
        variant: a variant directory.
    Returns:
        {"algorithm": "sha256", "files": {relative path: base64 SHA-256}}.
    Raises:
        NotADirectoryError: `variant` is not a directory.
    """
    variant = Path(variant)
    files = {}
    for rel in hashed_files(variant):
        digest = hashlib.sha256((variant / rel).read_bytes()).digest()
        files[rel] = base64.b64encode(digest).decode("ascii")
    return {"algorithm": ALGORITHM, "files": files}


def with_digest(metadata: dict, variant: Path) -> dict:
    """`metadata` with "digest" set to the digest of `variant`'s files, placed where
    kernel-builder's serializer puts it (after "backend", before "provenance").

    Args:
        metadata: the variant's metadata.json as a dict (not modified).
        variant: the variant directory, every file but metadata.json already in place.
    Returns:
        A new dict.
    Raises:
        TypeError: `metadata` is not a dict.
    """
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata must be a dict, got {type(metadata).__name__}")
    out = {k: v for k, v in metadata.items() if k not in ("digest", "provenance")}
    out["digest"] = variant_digest(variant)
    if "provenance" in metadata:
        out["provenance"] = metadata["provenance"]
    return out


def digest_problems(variant: Path) -> list:
    """How a variant's files differ from the digest its metadata.json records, in kernels'
    terms (a missing digest, another algorithm, missing, unknown or changed files).

    Args:
        variant: a variant directory with a metadata.json.
    Returns:
        One message per difference; empty when the files match.
    Raises:
        OSError, ValueError: metadata.json cannot be read or parsed.
    """
    recorded = json.loads((Path(variant) / "metadata.json").read_text()).get("digest")
    if recorded is None:
        return ["metadata.json records no digest"]
    if recorded.get("algorithm") != ALGORITHM:
        return [f"digest algorithm {recorded.get('algorithm')!r}, expected {ALGORITHM!r}"]
    want, got = recorded.get("files", {}), variant_digest(variant)["files"]
    problems = [f"changed: {p}" for p in sorted(want) if p in got and got[p] != want[p]]
    problems += [f"missing: {p}" for p in sorted(want) if p not in got]
    problems += [f"not in the digest: {p}" for p in sorted(got) if p not in want]
    return problems
