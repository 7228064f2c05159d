"""The generated documentation pages match the code, and the README stays a README."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_pages_are_current() -> None:
    """docs/config.md (config field help), docs/verifier-policy.md (policy clauses and their golden rows) and
    docs/layout.md (module docstrings) are what docs/gen.py renders from the code today."""
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "gen.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_gen_check_fails_on_a_stale_page(tmp_path: Path) -> None:
    """The check can fail: a copy of the docs with one page edited is reported stale, by name."""
    import shutil

    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "config.md"
    page.write_text(page.read_text() + "\nhand edit\n")
    script = (
        (ROOT / "docs" / "gen.py")
        .read_text()
        .replace("ROOT = Path(__file__).resolve().parents[1]", f"ROOT = Path({str(ROOT)!r})")
    )
    script = script.replace('DOCS = ROOT / "docs"', f"DOCS = Path({str(tmp_path / 'docs')!r})")
    (tmp_path / "gen.py").write_text(script)
    out = subprocess.run([sys.executable, str(tmp_path / "gen.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "config.md" in out.stderr


def test_readme_is_short_and_links_resolve() -> None:
    """At most 300 lines; every relative link in it names a file of the repository."""
    import re

    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 300
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text)
    missing = [link for link in links if not (ROOT / link).exists()]
    assert links and not missing, missing
