"""Text encodings: which one a file that is not UTF-8 is likely in, and reading it in one.

Every reader decodes UTF-8 (`calm_core.data.sources`): a row holding other bytes is
rejected as undecodable. Spreadsheets on Windows still save CSV in the machine's code
page (cp1252 in Western Europe, which is Latin-1 with a few more letters), so such a file
gets that rejection on every row with an accent. This module names the likely encoding
(charset-normalizer, installed with requests) and converts a file or an upload's bytes to
UTF-8 once, at the boundary, so that every reader, whole and streamed, stays as it is:

    guess = likely_encoding(data)           # None: the bytes are UTF-8 already
    utf8 = to_utf8(data, guess.encoding)    # what the readers then read
    load_file("quiz.csv", encoding="cp1252")  # calm eval --encoding cp1252

Bytes the chosen encoding cannot decode either are kept as they are, so the rows holding
them are still rejected, one by one, with the reason: nothing is silently replaced.
"""

from __future__ import annotations

import codecs
import tempfile
from dataclasses import dataclass
from pathlib import Path

from charset_normalizer import from_bytes

from calm_core.data.schema import DataError

UTF8 = "utf-8"
SAMPLE_BYTES = 1 << 20  # what the guess reads of a file: enough rows, a fraction of a second
CLOSE_CHAOS = 0.01  # candidates this close in charset-normalizer's "chaos" read equally well
PREFERRED_CHAOS = 0.1  # a common encoding this close is taken before a rare one that reads a little cleaner
CHUNK_BYTES = 1 << 20  # a file is converted this much at a time
# Among candidates that read about as well, the one a spreadsheet most likely wrote: a file
# of French or German questions reads as well in cp1250 (Central European) as in cp1252,
# but cp1250 turns "où" into "oů"; short Russian text reads a little cleaner in Mac
# Cyrillic than in cp1251, which is what Windows wrote it in. The order is how common each
# is for CSV exports.
PREFERRED = ("cp1252", "iso8859-1", "iso8859-15", "cp1250", "cp1251", "cp932", "gb18030", "big5", "euc_kr")
LABELS = {  # what a person knows an encoding as; others are shown by their codec name
    "cp1252": "Windows Western European, Latin-1's superset",
    "iso8859-1": "Latin-1",
    "iso8859-15": "Latin-9",
    "cp1250": "Windows Central European",
    "cp1251": "Windows Cyrillic",
    "cp932": "Japanese Shift-JIS, Windows",
    "shift_jis": "Japanese Shift-JIS",
    "gb18030": "Chinese GB18030",
    "big5": "Traditional Chinese Big5",
    "euc_kr": "Korean EUC-KR",
    "mac-roman": "Mac OS Roman",
    "utf-16": "UTF-16",
}


@dataclass(frozen=True)
class Guess:
    """The likely encoding of bytes that are not UTF-8: its Python codec name and how a
    person knows it."""

    encoding: str

    @property
    def label(self) -> str:
        return f"{self.encoding} ({LABELS[self.encoding]})" if self.encoding in LABELS else self.encoding


def codec_name(encoding: str) -> str:
    """Python's canonical name of `encoding` ("latin-1" -> "iso8859-1", "windows-1252" -> "cp1252");
    DataError naming common ones when Python knows no such encoding."""
    try:
        name = codecs.lookup(encoding.strip()).name
    except (LookupError, AttributeError):
        raise DataError(
            f"Expected a text encoding Python knows (utf-8, cp1252, latin-1, cp1250, shift_jis, ...), "
            f"but got {encoding!r}"
        ) from None
    return name


def is_utf8_name(encoding: str | None) -> bool:
    """Whether `encoding` is None or UTF-8 (with or without a BOM): the readers' own."""
    return encoding is None or codec_name(encoding) in (UTF8, "utf-8-sig")


def decodes_as_utf8(data: bytes) -> bool:
    """Whether `data` is UTF-8 text; a sample cut inside a character still counts."""
    try:
        codecs.getincrementaldecoder(UTF8)().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


def likely_encoding(data: bytes) -> Guess | None:
    """The likely encoding of `data` (at most `SAMPLE_BYTES` of it are read), or None when
    it is UTF-8 already or no encoding reads it as text."""
    sample = data[:SAMPLE_BYTES]
    if decodes_as_utf8(sample):
        return None

    matches = list(from_bytes(sample))
    if not matches:
        return None
    lowest = min(match.chaos for match in matches)
    names = {  # every codec a candidate close enough stands for, with its chaos
        codec_name(name): match.chaos
        for match in matches
        for name in (match.encoding, *match.could_be_from_charset)
        if match.chaos <= lowest + PREFERRED_CHAOS
    }
    preferred = next((name for name in PREFERRED if name in names), None)
    if preferred is not None:
        return Guess(preferred)
    close = [match for match in matches if match.chaos <= lowest + CLOSE_CHAOS]
    return Guess(codec_name(max(close, key=lambda match: match.coherence).encoding))


def file_encoding(path: Path) -> Guess | None:
    """`likely_encoding` of a file's first `SAMPLE_BYTES`; None for a file that cannot be read."""
    try:
        with Path(path).open("rb") as handle:
            return likely_encoding(handle.read(SAMPLE_BYTES))
    except OSError:
        return None


def to_utf8(data: bytes, encoding: str) -> bytes:
    """`data` read in `encoding` and written as UTF-8; bytes `encoding` cannot decode stay
    as they were (their rows are then rejected as undecodable, each named)."""
    return data.decode(codec_name(encoding), "surrogateescape").encode(UTF8, "surrogateescape")


def utf8_copy(path: Path, encoding: str, folder: Path | None = None) -> Path:
    """A UTF-8 copy of the file at `path` read in `encoding`, written a chunk at a time
    into `folder` (a new temporary folder by default) under the same name, so that its
    suffix still names its format."""
    decoder = codecs.getincrementaldecoder(codec_name(encoding))("surrogateescape")
    folder = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="calm-utf8-"))
    target = folder / Path(path).name
    with Path(path).open("rb") as source, target.open("wb") as out:
        while chunk := source.read(CHUNK_BYTES):
            out.write(decoder.decode(chunk).encode(UTF8, "surrogateescape"))
        out.write(decoder.decode(b"", final=True).encode(UTF8, "surrogateescape"))
    return target


def encoding_hint(guess: Guess | None) -> str:
    """The way out for a file that is not UTF-8, said the same way in the CLI and the studio."""
    if guess is None:
        return (
            "The file is not UTF-8 text: save it as UTF-8, or name its encoding "
            "(`calm ... --encoding NAME`; the Data page offers the one it detects)"
        )
    return (
        f"The file is not UTF-8 text; it looks like {guess.label}: read it in that encoding with "
        f"`--encoding {guess.encoding}` (calm eval, calm data split) or the Data page's "
        f"**Read it as {guess.encoding}** button, or save it as UTF-8"
    )
