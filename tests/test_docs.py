"""The documentation as a reader meets it: links that resolve, a short README with the
commands CI runs, user docs that describe the product, not its history, and generated
benchmark pages equal to what their committed stores generate.

Fast and TensorFlow-free: it reads Markdown files and the compact stores only.
"""

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
#: Pages another command generates from the committed run stores (dated by commit).
GENERATED = ROOT / "docs" / "benchmarks"
#: Pages that may name commits and branches: the record of what was tried.
HISTORY = {ROOT / "docs" / "design-notes.md"}
#: Pages that teach the API: they name it as `ksync.*` (the architecture and simulator
#: pages describe the modules themselves).
TEACHING = [README, ROOT / "docs" / "user-guide.md", ROOT / "docs" / "optimizers.md"]
# An import of, or a dotted name in, the packages the code lives in behind `ksync`.
BEHIND_KSYNC = re.compile(r"\bfrom\s+(?:strategies|cluster_sim)\b|"
                          r"\bimport\s+(?:[\w.]+\s*,\s*)*(?:strategies|cluster_sim)\b|"
                          r"(?<![\w./-])(?:strategies|cluster_sim\.local_cluster)\.\w")
MAX_README_LINES = 250
DEMO_COMMAND = "python -m pip install -e . && python -m cluster_sim demo"

FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
# A commit hash: 7-40 hex digits with at least one digit and one letter (so neither a
# plain number nor an English word such as "defaced").
COMMIT = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
                    r"(?![0-9A-Za-z])")
# A path under the git-ignored runs/ folder (not e.g. OUT/SCENARIO_runs/).
RUNS_PATH = re.compile(r"(?<![\w.-])runs/")


def markdown_files():
    files = [README, CHANGELOG, *sorted((ROOT / "docs").rglob("*.md"))]
    return [f for f in files if f.exists()]


def user_docs():
    """README, CHANGELOG and docs/, except the design notes and the generated pages."""
    return [f for f in markdown_files()
            if f not in HISTORY and GENERATED not in f.parents]


def prose(text: str) -> str:
    """``text`` without fenced code blocks (links and headings there are not Markdown)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = re.sub(r"(\*\*|__|\*|_(?=\W)|(?<=\W)_)", "", text)
    text = unicodedata.normalize("NFC", text).lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set:
    seen, out = {}, set()
    for _, title in HEADING.findall(prose(path.read_text())):
        base = slug(title)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path):
    for target in LINK.findall(prose(path.read_text())):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        yield target


def relative_links():
    for path in markdown_files():
        for target in links(path):
            yield path, target


def resolve(path: Path, target: str):
    file_part, _, anchor = target.partition("#")
    dest = path if not file_part else (path.parent / file_part).resolve()
    return dest, anchor


def awaiting_generation(dest: Path) -> bool:
    """A link into the generated benchmark pages before they are generated."""
    return not GENERATED.exists() and (dest == GENERATED or GENERATED in dest.parents)


def test_the_docs_exist():
    names = {f.relative_to(ROOT).as_posix() for f in markdown_files()}
    for page in ("README.md", "CHANGELOG.md", "docs/user-guide.md", "docs/optimizers.md",
                 "docs/architecture.md", "docs/simulator.md", "docs/benchmarks.md",
                 "docs/design-notes.md"):
        assert page in names, page


def test_every_relative_link_resolves():
    broken = []
    for path, target in relative_links():
        dest, anchor = resolve(path, target)
        if awaiting_generation(dest):
            continue
        where = f"{path.relative_to(ROOT)}: {target}"
        if not dest.exists():
            broken.append(f"{where} (no such file)")
        elif ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{where} (outside the repository)")
        elif anchor:
            if dest.suffix != ".md":
                broken.append(f"{where} (an anchor into a file that is not Markdown)")
            elif anchor not in anchors(dest):
                broken.append(f"{where} (no heading with anchor #{anchor})")
    assert not broken, "\n".join(broken)


def test_links_into_the_generated_benchmark_pages():
    waiting = [f"{p.relative_to(ROOT)}: {t}" for p, t in relative_links()
               if awaiting_generation(resolve(p, t)[0])]
    # The pages are generated and committed (`bench tables`): a link into them that
    # does not resolve is a broken link, not a page still to come.
    assert not waiting, "links into docs/benchmarks/ that resolve to no page: " + \
        ", ".join(waiting)


GENERATED_BY = re.compile(r"`(python -m cluster_sim bench tables ([^`]+))`")


def generated_pages():
    return sorted(GENERATED.glob("*.md")) if GENERATED.exists() else []


def test_the_demo_scenario_has_a_generated_page():
    from cluster_sim.cli.demo_race import PAGE
    assert ROOT / PAGE in generated_pages()


@pytest.mark.parametrize("page", generated_pages(), ids=lambda p: p.name)
def test_a_generated_page_is_its_stores_regenerated(page):
    from cluster_sim.cli.bench_tables import race_page
    text = page.read_text()
    found = GENERATED_BY.search(text)
    assert found, f"{page.relative_to(ROOT)} does not say the command that generated it"
    command, stores = found.group(1), found.group(2).split()
    assert race_page(*(ROOT / s for s in stores)) == text, (
        f"regenerate it: {command} > {page.relative_to(ROOT)}")


def test_readme_is_short():
    lines = README.read_text().splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines"


def test_readme_has_the_two_commands_exactly_as_ci_runs_them():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    [test_command] = [line for line in ci if line.startswith("python -m pip install")]
    assert "pytest" in test_command
    readme = README.read_text()
    blocks = [line for m in FENCE.finditer(readme) for line in m.group(0).splitlines()]
    for command in (DEMO_COMMAND, test_command):
        assert command in blocks, f"README.md has no code line {command!r}"


def test_user_docs_name_no_commit_and_no_runs_path():
    found = []
    for path in user_docs():
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            found += [f"{where}: commit {m.group(0)}" for m in COMMIT.finditer(line)]
            found += [f"{where}: runs/ path" for _ in RUNS_PATH.finditer(line)]
    assert not found, "\n".join(found)


def test_the_api_is_taught_as_ksync():
    found = [f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
             for path in TEACHING
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if BEHIND_KSYNC.search(line)]
    assert not found, "name these as ksync.*:\n" + "\n".join(found)


def test_the_checks_catch_what_they_should():
    assert slug("The one-line change") == "the-one-line-change"
    assert slug("What a step through `ksync` costs") == "what-a-step-through-ksync-costs"
    assert slug("Faults and recovery (PS, workers)") == "faults-and-recovery-ps-workers"
    assert [m.group(0) for m in COMMIT.finditer("at commit 7b5faa8, 1,148 updates")] == ["7b5faa8"]
    assert not COMMIT.search("1234567 defaced 0xdeadbeef")
    for taught in ("from strategies.checkpoint import X", "import ksync, strategies",
                   "`strategies.KSyncStrategy(r)`", "cluster_sim.local_cluster.LocalCluster"):
        assert BEHIND_KSYNC.search(taught), taught
    for fine in ("`strategies/`: the strategy", "ksync.KSyncStrategy", "python -m cluster_sim demo",
                 "`ksync`, `predictor`, `strategies` and `cluster_sim`", "several strategies."):
        assert not BEHIND_KSYNC.search(fine), fine
    assert not COMMIT.search("seeds 100-102 and 8,192 samples; a deadline; effaced")
    assert RUNS_PATH.search("see `runs/bench_sim`") and not RUNS_PATH.search("OUT/SCENARIO_runs/")
    assert list(LINK.findall("[a](b.md#c) and [`x`](../y/) and [w](https://z)")) == \
        ["b.md#c", "../y/", "https://z"]
