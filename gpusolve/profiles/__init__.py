"""The bundled ``measured-chain/1`` profiles (``README.md`` here describes the format) and the one
rule that turns a profile argument into a file: a path if it exists, else the name of a bundled
profile (with or without ``.json``). :meth:`gpusolve.Chain.load` and the command line both use it."""
from __future__ import annotations

import os
from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent


def names() -> list[str]:
    """Names of the bundled profiles, e.g. ``["densenet121_b64", ..., "vgg16_b64"]``."""
    return sorted(p.stem for p in DIRECTORY.glob("*.json"))


def resolve(spec: str | os.PathLike) -> Path:
    """The file a profile argument names: ``spec`` itself when it exists, else the bundled profile
    ``spec`` (a bare name, ``.json`` optional). Raises ``FileNotFoundError`` listing the bundled
    names, or ``ValueError`` for a directory."""
    if not os.fspath(spec).strip():
        raise ValueError(f"the profile argument is empty; give a profile file or a bundled name ({', '.join(names())})")
    path = Path(spec)
    if not path.exists():
        text = os.fspath(spec)
        bundled = DIRECTORY / (text if text.endswith(".json") else f"{text}.json")
        if len(path.parts) == 1 and bundled.is_file():
            return bundled
        raise FileNotFoundError(f"no such file or bundled profile: {text!r} (bundled: {', '.join(names())})")
    if path.is_dir():
        raise ValueError(f"{spec} is a directory, not a profile file")
    return path
