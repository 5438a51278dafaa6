"""The README's and docs/'s examples run as written: every ``gpusolve`` command of their shell blocks
(optional ``[...]`` parts dropped) and every Python block, in order, one namespace per page (a block that
does not start with an import continues the one before it). Two names are the user's own and get small
stand-ins here: ``MyModel`` (GPT-2 from transformers, two tiny layers) and ``loader``. An edit that breaks
an example fails here."""
from __future__ import annotations

import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from gpusolve.cli import main

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = (README, *sorted((ROOT / "docs").glob("*.md")))
# Names a Python block may take from the user's program: the test supplies them (stand_ins()).
USER_NAMES = ("MyModel", "loader")


def shell_commands(page: Path | None = None) -> list[str]:
    """The ``gpusolve`` command lines of the shell blocks of ``page`` (default: every page; comments,
    continuations and optional ``[...]`` parts resolved); the profile the Python example writes later is
    left out."""
    commands = []
    for path in (page,) if page else PAGES:
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", path.read_text(), re.S):
            if lang not in ("bash", ""):
                continue
            for line in body.replace("\\\n", " ").splitlines():
                line = line.split("  #")[0].strip()
                if not re.match(r"gpusolve(\s|$)", line) or "my_profile.json" in line:
                    continue
                commands.append(re.sub(r"\s*\[[^\]]*\]", "", line))
    return commands


def python_blocks(page: Path = README) -> list[str]:
    return re.findall(r"```python\n(.*?)```", page.read_text(), re.S)


def test_the_readme_has_examples():
    assert {p.name for p in PAGES} >= {"README.md", "pytorch.md", "join.md", "offload.md", "cost-model.md",
                                       "results.md"}
    readme = shell_commands(README)
    assert "gpusolve demo" in readme and any("--offload" in c for c in readme) and len(readme) >= 10
    assert any("auto_checkpoint" in b for b in python_blocks(README))
    assert len(shell_commands()) >= 14 and sum(len(python_blocks(p)) for p in PAGES) >= 8


def test_the_pages_link_each_other():
    """Every relative link of a page names a file that exists (and a heading of it, where it names one)."""
    for page in PAGES:
        for target in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", page.read_text()):
            path, anchor = target
            file = (page.parent / path) if path else page
            assert file.exists(), (page.name, path)
            if anchor:
                slugs = {re.sub(r"[^a-z0-9 _-]", "", h.lower()).replace(" ", "-")
                         for h in re.findall(r"^#+ (.*)$", file.read_text(), re.M)}
                assert anchor in slugs, (page.name, path, anchor)


def test_the_pages_name_real_api():
    """Every dotted ``gpusolve.`` / ``torch_exec.`` name in a page's code spans resolves (a renamed class,
    function or module breaks the page)."""
    import importlib
    pytest.importorskip("torch")
    names = {m.group(1) for page in PAGES for code in re.findall(r"`([^`]+)`", page.read_text())
             for m in re.finditer(r"\b((?:torch_exec|gpusolve)(?:\.[A-Za-z_]\w*)+)", code)}
    assert len(names) >= 15
    for name in sorted(names):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                continue
            for attr in parts[i:]:
                assert hasattr(obj, attr), name
                obj = getattr(obj, attr)
            break


@pytest.mark.parametrize("command", shell_commands())
def test_shell_command(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # --out files land here
    argv = [str(ROOT / a) if a.startswith("bench/") else a for a in shlex.split(command)[1:]]
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own exits
            code = exc.code
    assert code == (2 if not argv else 0), command  # `gpusolve` alone lists the commands, exit 2
    if "--json" in argv:
        import json
        json.loads(out.getvalue())


def stand_ins() -> dict:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=97, n_positions=16)

    def my_model():
        torch.manual_seed(0)
        return transformers.GPT2LMHeadModel(config)

    ids = torch.randint(0, 97, (2, 16), generator=torch.Generator().manual_seed(0))
    return {"MyModel": my_model, "loader": [{"input_ids": ids, "labels": ids}] * 2}


@pytest.mark.parametrize("page", [p for p in PAGES if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks(page, tmp_path, monkeypatch):
    """In order, sharing one namespace per page; the README's first block (a one-line teaser on an
    undefined ``model``) is shown again in full later and is skipped."""
    monkeypatch.chdir(tmp_path)  # the profile example writes my_profile.json
    namespace: dict = {}
    ran, previous = [], False
    for block in python_blocks(page):
        first = block.lstrip().splitlines()[0]
        if not (first.startswith(("import ", "from ")) or previous):
            previous = False
            continue
        if any(name in block for name in USER_NAMES):
            namespace.update(stand_ins())
        elif "torch" in block:
            pytest.importorskip("torch")
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(block, f"{page.name} block {len(ran)}", "exec"), namespace)
        ran.append(first)
        previous = True
    assert len(ran) == len(python_blocks(page)) - (page == README)
    if page.name == "pytorch.md":
        assert (tmp_path / "my_profile.json").exists()
