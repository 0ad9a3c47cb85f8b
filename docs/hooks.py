"""MkDocs hooks: the site reads the same Markdown that GitHub shows, links included.

The Markdown links as GitHub resolves them: README.md from the repository root (`docs/x.md`,
`examples/own_env.py`), the pages in docs/ from there (`../examples/own_env.py`). The site's home
page is README.md, and a link to a file outside docs/ has no page in the site. So, at build time
only (no file on disk changes):

- `index.md` shows README.md, its links made relative to docs/;
- each repository file that a page links to outside docs/ (the example scripts) becomes a
  generated page showing its source, and the link goes there;
- a link that resolves to no file is left alone, for `mkdocs build --strict` to refuse.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files, InclusionLevel

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
_LINK = re.compile(r"(\]\()([^)#\s]+)")
_LANG = {".py": "python", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash"}


def _source_dir(src_uri: str) -> Path:
    """Where a page's links are resolved from on GitHub: the home page is README.md's."""
    return ROOT if src_uri == "index.md" else (DOCS / src_uri).parent


def _outside(src_uri: str, markdown: str) -> dict[str, str]:
    """Each relative link of the page that points at an existing repository file outside docs/,
    mapped to that file's path from the repository root."""
    out = {}
    for _, target in _LINK.findall(markdown):
        if "://" in target or target.startswith(("/", "mailto:")):
            continue
        path = Path(posixpath.normpath((_source_dir(src_uri) / target).as_posix()))
        if path.is_file() and DOCS not in path.parents and path != README:
            out[target] = path.relative_to(ROOT).as_posix()
    return out


def _page_of(repo_path: str) -> str:
    """The generated page that shows a repository file outside docs/."""
    return f"_repo/{repo_path}.md"


def _markdown(src_uri: str) -> str:
    source = README if src_uri == "index.md" else DOCS / src_uri
    return source.read_text(encoding="utf-8")


def on_files(files: Files, config: Any) -> Files:
    pages = [f.src_uri for f in files if f.src_uri.endswith(".md")]
    linked = {p for page in pages for p in _outside(page, _markdown(page)).values()}
    for repo_path in sorted(linked):
        text = (ROOT / repo_path).read_text(encoding="utf-8")
        lang = _LANG.get(Path(repo_path).suffix, "text")
        content = f"# `{repo_path}`\n\n```{lang}\n{text}```\n"
        files.append(
            File.generated(
                config, _page_of(repo_path), content=content, inclusion=InclusionLevel.NOT_IN_NAV
            )
        )
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    src_uri = page.file.src_uri
    if src_uri == "index.md":
        markdown = README.read_text(encoding="utf-8")
    outside = _outside(src_uri, markdown)
    page_dir = posixpath.dirname(src_uri)

    def relink(match: re.Match[str]) -> str:
        target = match.group(2)
        if target in outside:
            target = posixpath.relpath(_page_of(outside[target]), page_dir or ".")
        elif src_uri == "index.md" and target.startswith("docs/"):
            target = target.removeprefix("docs/")
        return match.group(1) + target

    return _LINK.sub(relink, markdown)
