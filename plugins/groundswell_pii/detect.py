"""Finding personal data in text: the built-in kinds, their checks, and the scanner.

Pure Python and `re`; nothing here knows about agents. A `Scanner` runs every
detector over a text, keeps the non-overlapping matches (leftmost, then
longest, then the detector listed first) and replaces each with its kind's
placeholder.

Every pattern is anchored on both sides so that it matches a whole token and
never a slice of a longer one (a card number inside a 25-digit id, a phone
number inside ``ORD-415-555-2671``). Card numbers must pass the Luhn check and
IBANs the ISO 7064 mod-97 check, which keeps order ids, timestamps and
product codes that merely look alike.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["KINDS", "Detector", "Scanner", "builtin_detectors", "iban_valid", "luhn_valid"]

KINDS: tuple[str, ...] = ("EMAIL", "PHONE", "CARD", "IBAN", "SSN")
"""The built-in kinds: ``PIIRedactor(kinds=...)`` takes any of them (default: all)."""


def luhn_valid(digits: str) -> bool:
    """True when ``digits`` (digits only) passes the Luhn checksum of payment cards."""
    total = 0
    for i, char in enumerate(reversed(digits)):
        n = ord(char) - 48
        if i % 2:
            n = n * 2 - 9 if n > 4 else n * 2
        total += n
    return total % 10 == 0


# IBAN length by country (the ISO 13616 registry); other country codes have no IBANs.
_IBAN_LENGTHS = {
    **dict.fromkeys(["NO"], 15),
    **dict.fromkeys(["BE"], 16),
    **dict.fromkeys(["DK", "FI", "FK", "FO", "GL", "NL", "SD"], 18),
    **dict.fromkeys(["MK", "SI"], 19),
    **dict.fromkeys(["AT", "BA", "EE", "KZ", "LT", "LU", "MN", "XK"], 20),
    **dict.fromkeys(["CH", "HR", "LI", "LV"], 21),
    **dict.fromkeys(["BG", "BH", "CR", "DE", "GB", "GE", "IE", "ME", "RS", "VA"], 22),
    **dict.fromkeys(["AE", "GI", "IL", "IQ", "OM", "SO", "TL"], 23),
    **dict.fromkeys(["AD", "CZ", "ES", "MD", "PK", "RO", "SA", "SE", "SK", "TN", "VG"], 24),
    **dict.fromkeys(["LY", "PT", "ST"], 25),
    **dict.fromkeys(["IS", "TR"], 26),
    **dict.fromkeys(["BI", "DJ", "FR", "GR", "IT", "MC", "MR", "SM"], 27),
    **dict.fromkeys(["AL", "AZ", "BY", "CY", "DO", "GT", "HU", "LB", "NI", "PL", "SV"], 28),
    **dict.fromkeys(["BR", "EG", "PS", "QA", "UA"], 29),
    **dict.fromkeys(["JO", "KW", "MU", "YE"], 30),
    **dict.fromkeys(["MT", "SC"], 31),
    **dict.fromkeys(["LC"], 32),
    **dict.fromkeys(["RU"], 33),
}


def iban_valid(iban: str) -> bool:
    """True when ``iban`` (no spaces, upper case) has its country's length and a valid
    mod-97 checksum."""
    if _IBAN_LENGTHS.get(iban[:2]) != len(iban):
        return False
    moved = iban[4:] + iban[:4]
    # Letters count as two digits (A=10 ... Z=35); the remainder is taken piecewise.
    remainder = 0
    for char in moved:
        value = int(char, 36)
        remainder = (remainder * (100 if value > 9 else 10) + value) % 97
    return remainder == 1


def _digits(text: str) -> str:
    return "".join(c for c in text if c.isdigit())


def _card(candidate: str) -> bool:
    digits = _digits(candidate)
    return 13 <= len(digits) <= 19 and luhn_valid(digits)


def _iban(candidate: str) -> bool:
    return iban_valid(candidate.replace(" ", ""))


def _international_phone(candidate: str) -> bool:
    # E.164: at most 15 digits, country code included; fewer than 8 is no phone number.
    return 8 <= len(_digits(candidate)) <= 15


@dataclass(frozen=True, slots=True)
class Detector:
    """One pattern of one kind.

    ``valid`` (if given) checks a match; when it fails, shorter prefixes that
    end just before one of ``cut_at`` are tried, so a valid number followed by
    a stray digit group (``4111 1111 1111 1111 22``) is still found.
    """

    kind: str
    regex: re.Pattern[str]
    valid: Callable[[str], bool] | None = None
    cut_at: str = ""

    def accept(self, candidate: str) -> int:
        """The length of the longest valid prefix of ``candidate`` (0: none)."""
        valid = self.valid
        if valid is None or valid(candidate):
            return len(candidate)
        for i in range(len(candidate) - 1, 0, -1):
            if candidate[i] in self.cut_at and valid(candidate[:i]):
                return i
        return 0


_EMAIL = re.compile(
    r"(?<![\w.%+-])[A-Za-z0-9._%+-]{1,64}@(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)+"
    r"[A-Za-z]{2,24}(?![\w-])"
)
# +<country> then digits in groups, optionally an area code in parentheses.
_PHONE_INTERNATIONAL = re.compile(
    r"(?<![\w+])\+[1-9]\d{0,2}[ .-]?(?:\(\d{1,4}\)[ .-]?)?(?:\d[ .-]?){5,13}\d(?!\d)"
)
# North American 3-3-4 with one kind of separator: (415) 555-2671, 415-555-2671, 415.555.2671.
_PHONE_NATIONAL = re.compile(
    r"(?<![\w+.-])(?:\(\d{3}\) ?|\d{3}([ .-]))\d{3}(?(1)\1|[ .-])\d{4}(?![\w-]|\.\d)"
)
# Unbroken, or in the groups cards are printed in (4-4-4-4[-3], 4-6-5, 4-6-4).
_CARD = re.compile(
    r"(?<![\w+.-])[2-6]\d{3}(?:\d{9,15}|([ -])\d{4}\1\d{4}\1\d{4}(?:\1\d{3})?|([ -])\d{6}\2\d{4,5})"
    r"(?![\w-]|\.\d)"
)
_IBAN = re.compile(
    r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?:[A-Z0-9]{11,30}|(?: [A-Z0-9]{4}){2,7}(?: [A-Z0-9]{1,4})?)"
    r"(?![A-Za-z0-9])"
)
# Area 000, 666 and 900-999, group 00 and serial 0000 are never issued.
_SSN = re.compile(r"(?<![\w.-])(?!000|666|9\d\d)\d{3}-(?!00)\d{2}-(?!0000)\d{4}(?![\w-]|\.\d)")


def builtin_detectors() -> dict[str, tuple[Detector, ...]]:
    """The detectors of each built-in kind."""
    return {
        "EMAIL": (Detector("EMAIL", _EMAIL),),
        "PHONE": (
            Detector("PHONE", _PHONE_INTERNATIONAL, _international_phone, " .-"),
            Detector("PHONE", _PHONE_NATIONAL),
        ),
        "CARD": (Detector("CARD", _CARD, _card, " -"),),
        "IBAN": (Detector("IBAN", _IBAN, _iban, " "),),
        "SSN": (Detector("SSN", _SSN),),
    }


# Backslash escapes (JSON, repr): ``\\n`` before a value must not glue it to a word.
_ESCAPE = re.compile(r"\\(?:u[0-9A-Fa-f]{4}|.)", re.DOTALL)


def _unescaped_view(text: str) -> str:
    """``text`` with each backslash escape blanked out to as many NULs (same offsets)."""
    if "\\" not in text:
        return text
    return _ESCAPE.sub(lambda m: "\0" * len(m.group()), text)


class Scanner:
    """Finds and replaces matches of ``detectors`` (earlier ones win ties)."""

    __slots__ = ("detectors", "placeholders")

    def __init__(self, detectors: Sequence[Detector], placeholders: dict[str, str]) -> None:
        self.detectors = tuple(detectors)
        self.placeholders = placeholders

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, kind)`` of every match, in order, none overlapping."""
        found: list[tuple[int, int, int, str]] = []
        # Tool results are often JSON: {"note": "call\\n415-555-2671"} must be found too.
        view = _unescaped_view(text)
        for rank, detector in enumerate(self.detectors):
            search = detector.regex.search
            pos = 0
            while (match := search(view, pos)) is not None:
                start, end = match.span()
                length = detector.accept(match.group()) if end > start else 0
                if length:
                    found.append((start, start + length, rank, detector.kind))
                    pos = start + length
                else:
                    pos = start + 1
        if not found:
            return []
        found.sort(key=lambda f: (f[0], f[0] - f[1], f[2]))
        chosen: list[tuple[int, int, str]] = []
        reached = 0
        for start, end, _, kind in found:
            if start >= reached:
                chosen.append((start, end, kind))
                reached = end
        return chosen

    def redact(self, text: str) -> tuple[str, Counter[str]]:
        """``text`` with every match replaced by its placeholder, and the count per kind."""
        counts: Counter[str] = Counter()
        spans = self.find(text)
        if not spans:
            return text, counts
        parts: list[str] = []
        previous = 0
        for start, end, kind in spans:
            parts += (text[previous:start], self.placeholders[kind])
            counts[kind] += 1
            previous = end
        parts.append(text[previous:])
        return "".join(parts), counts
