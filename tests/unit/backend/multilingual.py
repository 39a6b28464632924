"""A multilingual set of real text, assembled at run time from files on this machine that no one here wrote: the
translated messages (msgstr) of the Debian packages' gettext catalogs, /usr/share/locale/*/LC_MESSAGES/*.mo."""

from __future__ import annotations

import gettext
import unicodedata
from pathlib import Path

LOCALES = Path("/usr/share/locale")


def _script(text: str) -> str:
    """The script of a text's first letter, from its Unicode name (LATIN, CYRILLIC, CJK, ...)."""
    for c in text:
        if c.isalpha():
            return unicodedata.name(c, "UNKNOWN").split()[0]
    return "NONE"


def texts(per_catalog: int = 12, catalogs_per_locale: int = 4) -> dict[str, str]:
    """text -> its script: the first translations of the first catalogs of every locale (sorted, deterministic)."""
    out: dict[str, str] = {}
    for locale in sorted(LOCALES.glob("*/LC_MESSAGES")):
        for mo in sorted(locale.glob("*.mo"))[:catalogs_per_locale]:
            try:
                with mo.open("rb") as f:
                    catalog = gettext.GNUTranslations(f)._catalog  # msgid -> msgstr
            except (OSError, UnicodeDecodeError, ValueError, IndexError, SyntaxError):  # a catalog Python cannot read
                continue
            taken = 0
            for msgid, msgstr in sorted(catalog.items(), key=lambda kv: str(kv[0])):
                if not msgid or not isinstance(msgstr, str) or len(msgstr.strip()) < 2 or msgstr == msgid:
                    continue
                out.setdefault(msgstr, _script(msgstr))
                taken += 1
                if taken == per_catalog:
                    break
    return out
