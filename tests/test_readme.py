"""The README as a newcomer reads it: its links resolve, its `distrl train` commands parse, and
it speaks the user's words, not the project's internal ones."""

from __future__ import annotations

import posixpath
import re
import shlex
from pathlib import Path

import pytest

from distrl.args import parse_train_args
from distrl.population import parse, take_flags

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}


def test_links_resolve():
    for page, text in {"README.md": README, **DOCS}.items():
        base = ROOT if page == "README.md" else ROOT / "docs"
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if target.startswith("http"):
                continue
            assert (base / target).exists(), f"{page} links to missing {target}"


def _anchors(text: str) -> set[str]:
    """The anchors a Markdown renderer gives a page's headings (code blocks skipped): lower case,
    punctuation dropped, spaces to hyphens."""
    out, fenced = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def test_link_anchors_resolve():
    pages = {"README.md": README, **{f"docs/{name}": text for name, text in DOCS.items()}}
    for page, text in pages.items():
        base = Path(page).parent
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", text):
            if target.startswith("http"):
                continue
            linked = posixpath.normpath((base / target).as_posix()) if target else page
            assert linked in pages, f"{page} links to {target}#{anchor}, a page not checked here"
            assert anchor in _anchors(pages[linked]), f"{page} links to missing {target}#{anchor}"


def _train_commands() -> list[list[str]]:
    blocks = re.findall(r"```bash\n(.*?)```", README, re.S)
    out = []
    for line in "\n".join(blocks).splitlines():
        words = shlex.split(line, comments=True)
        if "train" in words and words[0] != "make" and not {"<timestamp>", "--help"} & set(words):
            i = words.index("train")
            if words[i + 1 : i + 2] != ["--config"]:
                out.append(words[i + 1 :])
    return out


@pytest.mark.parametrize("argv", _train_commands(), ids=" ".join)
def test_train_commands_parse(argv):
    if argv[0] in ("halfcheetah", "hopper", "walker2d", "ant"):
        pytest.importorskip("mujoco")
    own, rest = take_flags(argv)
    if own is not None:  # a population: its own flags, then the members' train overrides
        parse(own, rest)
        return
    parse_train_args(argv)


def test_no_internal_words():
    for page, text in {"README.md": README, **DOCS}.items():
        hits = re.findall(r"\b(?:issue #?\d+|seed 00\d)\b", text, re.I)
        assert not hits, f"{page}: {hits}"


def test_readme_is_a_quick_read():
    assert len(README.splitlines()) <= 120
