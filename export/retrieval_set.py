"""The retrieval set that export's retrieval gate scores: real multilingual text that no one on the project wrote.

``python -m export.retrieval_set`` regenerates ``export/data/retrieval.tsv`` from the gettext catalogs of Debian
packages installed on this machine (``/usr/share/locale/*/LC_MESSAGES/*.mo``): English messages (msgid) and their
translations (msgstr). Every row records its source (locale, catalog, Debian package) and that package's licence,
read from its ``/usr/share/doc/<package>/copyright``; only catalogs of packages under free licences that allow
redistribution (GPL, LGPL) are read. The tokenizer tests read the first four catalogs of every locale
(tests/unit/backend/multilingual.py); this set never reads those files, so the two stay apart.

Selection is deterministic: per script, candidates (25-200 characters, whitespace collapsed, not equal to their
msgid) in the order of their text's sha256, at most ``PER_LOCALE`` per locale, up to the script's quota.
"""

from __future__ import annotations

import argparse
import collections
import gettext
import hashlib
import logging
import re
import subprocess
import unicodedata
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

log = logging.getLogger(__name__)

LOCALES = Path("/usr/share/locale")
OUTPUT = Path(__file__).parent / "data" / "retrieval.tsv"
COLUMNS = ("text", "script", "locale", "catalog", "package", "licence")

# Catalogs whose messages are sentences or phrases (descriptions, errors, help text), each package's licence as its
# copyright file states it (DEP-5 "Files: *"; shared-mime-info's is prose: GPL-2 or later).
CATALOGS = {
    "gsettings-desktop-schemas": "LGPL-2.1+",
    "glib20": "LGPL-2.1+",
    "gdk-pixbuf": "LGPL-2+",
    "coreutils": "GPL-3+",
    "grep": "GPL-3+",
    "gstreamer-1.0": "LGPL-2+",
    "shared-mime-info": "GPL-2+",
    "at-spi2-core": "LGPL-2+",
    "software-properties": "GPL-2+",
    "libapt-pkg6.0": "GPL-2+",
    "python-apt": "GPL-2+",
}
TOKENIZER_TEST_CATALOGS_PER_LOCALE = 4  # tests/unit/backend/multilingual.py reads these; this set does not
MIN_CHARS, MAX_CHARS = 25, 200
ENGLISH = 180  # msgids
QUOTA = {"LATIN": 180, "CYRILLIC": 60}
DEFAULT_QUOTA = 36
MIN_SCRIPT = 20  # a script with fewer candidates is left out
PER_LOCALE = 36


@dataclass(frozen=True)
class Text:
    text: str
    script: str
    locale: str
    catalog: str
    package: str
    licence: str

    def row(self) -> str:
        return "\t".join((self.text, self.script, self.locale, self.catalog, self.package, self.licence))


def script_of(text: str) -> str:
    """The script most of a text's letters belong to, from their Unicode names (LATIN, CYRILLIC, CJK, ...)."""
    counts = collections.Counter(unicodedata.name(c, "UNKNOWN").split()[0] for c in text if c.isalpha())
    return counts.most_common(1)[0][0] if counts else "NONE"


def _clean(text: str) -> str:
    return " ".join(text.split())


def _usable(text: str) -> bool:
    # a message that is mostly a format string or markup says little
    return MIN_CHARS <= len(text) <= MAX_CHARS and len(re.sub(r"%[-\w.]*|<[^>]*>|[{}\\]", "", text)) >= MIN_CHARS


def _sources() -> list[tuple[str, str, Path]]:
    """(locale, catalog, file) for every chosen catalog outside the tokenizer tests' files."""
    out = []
    for messages in sorted(LOCALES.glob("*/LC_MESSAGES")):
        skipped = set(sorted(messages.glob("*.mo"))[:TOKENIZER_TEST_CATALOGS_PER_LOCALE])
        for catalog in CATALOGS:
            mo = messages / f"{catalog}.mo"
            if mo.is_file() and mo not in skipped:
                out.append((messages.parent.name, catalog, mo))
    return out


def _packages(files: list[Path]) -> dict[Path, str]:
    """The Debian package that installed each file (``dpkg -S``)."""
    result = subprocess.run(["dpkg", "-S", *map(str, files)], capture_output=True, text=True, check=False)
    owners = {}
    for line in result.stdout.splitlines():
        package, _, path = line.partition(": ")
        owners[Path(path)] = package.split(":")[0]
    return owners


def _read(mo: Path) -> dict[str, str]:
    try:
        with mo.open("rb") as f:
            catalog = gettext.GNUTranslations(f)._catalog  # msgid -> msgstr (plural forms keyed by tuples)
    except (OSError, UnicodeDecodeError, ValueError, IndexError, SyntaxError):
        return {}
    return {k: v for k, v in catalog.items() if isinstance(k, str) and isinstance(v, str) and k}


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def build() -> list[Text]:
    sources = _sources()
    owners = _packages([mo for *_, mo in sources])
    by_script: dict[str, list[Text]] = collections.defaultdict(list)
    english: dict[str, Text] = {}
    for locale, catalog, mo in sources:
        package = owners.get(mo, "")
        if not package:
            continue
        for msgid, msgstr in _read(mo).items():
            src, dst = _clean(msgid), _clean(msgstr)
            if _usable(src) and script_of(src) == "LATIN":
                english.setdefault(src, Text(src, "LATIN", "en", catalog, package, CATALOGS[catalog]))
            if _usable(dst) and dst != src:
                by_script[script_of(dst)].append(Text(dst, script_of(dst), locale, catalog, package, CATALOGS[catalog]))
    chosen: dict[str, Text] = {}
    for t in sorted(english.values(), key=lambda t: _digest(t.text))[:ENGLISH]:
        chosen[t.text] = t
    for script, candidates in sorted(by_script.items()):
        if script in ("NONE", "UNKNOWN") or len({t.text for t in candidates}) < MIN_SCRIPT:
            continue
        per_locale: collections.Counter[str] = collections.Counter()
        taken = 0
        for t in sorted(candidates, key=lambda t: (_digest(t.text), t.locale, t.catalog)):
            if taken == QUOTA.get(script, DEFAULT_QUOTA):
                break
            if t.text in chosen or per_locale[t.locale] == PER_LOCALE:
                continue
            chosen[t.text] = t
            per_locale[t.locale] += 1
            taken += 1
    return sorted(chosen.values(), key=lambda t: (t.script, t.locale, _digest(t.text)))


def write(texts: list[Text], path: Path = OUTPUT) -> None:
    scripts = collections.Counter(t.script for t in texts)
    header = [
        "# The retrieval gate's texts (export/verify.py), regenerated by `python -m export.retrieval_set`.",
        "# Source: the gettext catalogs (/usr/share/locale/<locale>/LC_MESSAGES/<catalog>.mo) of the Debian package",
        "# in each row, under the licence in its row (that package's /usr/share/doc/<package>/copyright);",
        "# locale 'en' rows are the catalog's original English messages (msgid).",
        f"# {len(texts)} texts, {len(scripts)} scripts: "
        + ", ".join(f"{s} {n}" for s, n in sorted(scripts.items(), key=lambda kv: -kv[1])),
        "\t".join(COLUMNS),
    ]
    path.write_text("\n".join([*header, *(t.row() for t in texts)]) + "\n", encoding="utf-8")


def load() -> list[Text]:
    """The shipped set, in file order."""
    lines = resources.files("export").joinpath("data/retrieval.tsv").read_text(encoding="utf-8").splitlines()
    rows = [line.split("\t") for line in lines if line and not line.startswith("#")]
    if tuple(rows[0]) != COLUMNS:
        raise ValueError(f"data/retrieval.tsv: header {rows[0]} is not {COLUMNS}")
    return [Text(*row) for row in rows[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export.retrieval_set", description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    texts = build()
    write(texts, args.output)
    log.info("wrote %d texts in %d scripts to %s", len(texts), len({t.script for t in texts}), args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
