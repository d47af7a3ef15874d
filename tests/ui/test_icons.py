"""Every icon the app draws is one of Material Symbols, the font Streamlit ships: an emoji is drawn by the
browser's own fonts, and a machine without an emoji font (Debian's Chromium, a fresh Linux box) draws an empty box."""
import ast
import pathlib
import re

UI = pathlib.Path(__file__).resolve().parents[2] / "attnviz" / "ui"
# what a browser draws as an emoji: a pictograph, a symbol of Unicode's Emoji_Presentation (✋, ✅, ⭐), or any
# character asked to be one (U+FE0F after it: ℹ️, ⚠️); a plain symbol such as ★ is text every font draws
EMOJI = re.compile("[\U0001F000-\U0001FAFF\uFE0F\u231A\u231B\u23E9-\u23EC\u23F0\u23F3\u25FD\u25FE\u2614\u2615"
                   "\u2648-\u2653\u267F\u2693\u26A1\u26AA\u26AB\u26BD\u26BE\u26C4\u26C5\u26CE\u26D4\u26EA"
                   "\u26F2-\u26F5\u26FA\u26FD\u2705\u270A\u270B\u2728\u274C\u274E\u2753-\u2755\u2757"
                   "\u2795-\u2797\u27B0\u27BF\u2B1B\u2B1C\u2B50\u2B55]")


def _strings(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node


def test_the_app_draws_no_emoji_as_an_icon():
    found = []
    for path in sorted(UI.glob("*.py")):
        for node in _strings(ast.parse(path.read_text(encoding="utf-8"))):
            if EMOJI.search(node.value):
                found.append(f"{path.name}:{node.lineno}: {node.value[:40]!r}")
    assert found == [], "use a :material/…: icon, which Streamlit's own font draws:\n" + "\n".join(found)


def test_every_icon_argument_names_a_material_symbol():
    bad = []
    for path in sorted(UI.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    value = keyword.value
                    if keyword.arg == "icon" and isinstance(value, ast.Constant) and isinstance(value.value, str) \
                            and not re.fullmatch(r":material/[a-z0-9_]+:", value.value):
                        bad.append(f"{path.name}:{node.lineno}: icon={value.value!r}")
    assert bad == []
