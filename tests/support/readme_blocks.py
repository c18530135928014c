"""README's code blocks, found by the heading they sit under, so the tests run
the examples as the README shows them and the two cannot drift apart."""
import collections
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


def code_blocks(heading, language="python"):
    """The ``language`` blocks of the README section that starts at ``heading``
    (a whole heading line, e.g. ``"### A transformers model"``), up to the next
    heading of any level; fails when the heading or its blocks are missing."""
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert heading in lines, f"README has no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if re.match(r"#{1,6} ", lines[i])
                and not _inside_fence(lines, i)), len(lines))
    section = "\n".join(lines[start:end])
    blocks = re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.M | re.S)
    assert blocks, f"README's section {heading!r} has no {language} block"
    return blocks


def _inside_fence(lines, index):
    """Whether line ``index`` sits inside a fenced block (a '# comment' there is no heading)."""
    return sum(1 for line in lines[:index] if line.startswith("```")) % 2 == 1


Block = collections.namedtuple("Block", "section language text line")


def fenced_blocks(path=README):
    """Every fenced block of a Markdown file, in order, as :class:`Block`:
    ``section`` the last top-level heading above it (``# `` or ``## ``; the
    title for blocks before the first ``## ``), ``language`` what follows the
    opening fence (``""`` for none), ``text`` its lines, ``line`` the line
    number of its first one."""
    blocks, section, fence = [], None, None
    for number, line in enumerate(pathlib.Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if fence is not None:
            if line.startswith("```"):
                blocks.append(Block(section, fence[0], "\n".join(fence[2]) + "\n", fence[1]))
                fence = None
            else:
                fence[2].append(line)
        elif line.startswith("```"):
            fence = (line[3:].strip(), number + 1, [])
        elif re.match(r"#{1,2} ", line):
            section = line
    assert fence is None, f"{path}: the block opened before line {fence[1]} is never closed"
    return blocks
