"""Every relative link of README.md and docs/*.md leads somewhere: the README was split into pages under docs/, and
a link written for one place (`docs/x.md` from the README, `x.md` from a page, `../cluster/README.md`) breaks
silently when text moves between them. A link's `#anchor` must name a heading of its target, as GitHub spells it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def links(page: Path) -> list[str]:
    """The targets of a page's markdown links, code blocks and inline code left out (they show syntax, not links)."""
    text = re.sub(r"`[^`\n]*`", "", FENCE.sub("", page.read_text()))
    return LINK.findall(text)


def anchors(page: Path) -> set[str]:
    """GitHub's ids for a page's headings: lower case, punctuation dropped except '-' and '_', spaces as '-'."""
    headings = re.findall(r"^#{1,6} +(.+?) *$", FENCE.sub("", page.read_text()), re.M)
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in headings}


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_points_at_a_file_that_exists(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...: not a file of the repository
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading '{anchor}' in {file.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_check_sees_the_links_of_the_readme_s_read_on_list():
    """The pattern finds the links it must check (a pattern that matched nothing would pass every page)."""
    assert {"docs/running.md", "docs/own-learners.md", "docs/engines.md"} <= set(links(ROOT / "README.md"))
