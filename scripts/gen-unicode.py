#!/usr/bin/env python3
"""gen-unicode.py - generate lib/text/unicode_data.c, the Unicode tables the
tokenizers need, matching llama.cpp's src/unicode-data.cpp (commit c392e509).

What llama.cpp's tables hold, and so what these hold:
  * one category flag per code point, as runs {first code point, flags}:
      Cn (unassigned) -> UNDEFINED, N* -> NUMBER, L* -> LETTER, Z* -> SEPARATOR,
      M* -> MARK, P* -> PUNCTUATION, S* -> SYMBOL, Cc/Cf/Co/Cs -> CONTROL;
  * the whitespace set: the White_Space property of PropList.txt (25 code
    points, U+0085 NEL included, U+FEFF BOM excluded).
llama.cpp's tables were generated from Unicode 15.1 (they contain CJK
extension I, U+2EBF0..U+2EE5D, and nothing from 16.0 such as U+1C89).

Source of the data, in order of preference:
  1. a UnicodeData.txt given as argument (Debian: package unicode-data,
     /usr/share/unicode/UnicodeData.txt; bookworm ships 15.0.0);
  2. Python's own unicodedata module (3.11: Unicode 14.0; 3.13: 15.1).
Whatever the source, the version must be 15.0 or 15.1: data for 15.0 is
brought to 15.1 by adding the 627 characters 15.1 added (listed below from
the Unicode 15.1 release notes: 622 CJK extension I ideographs, Lo, and five
ideographic description characters, So). Older data is refused, because the
tables would then not match llama.cpp's.

The (?i:'s|'t|...) contractions of the Llama 3 pre-tokenizer compare the
lower-case of a code point with ASCII letters; the script checks that no
non-ASCII code point lower-cases to one of those letters, so no lower-case
table is needed (C tolower on ASCII is exact).

Usage: scripts/gen-unicode.py [/usr/share/unicode/UnicodeData.txt] > lib/text/unicode_data.c
"""
import sys
import unicodedata

MAX = 0x110000

UNDEFINED, NUMBER, LETTER, SEPARATOR, MARK, PUNCT, SYMBOL, CONTROL = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80)

CAT_FLAG = {
    "Cn": UNDEFINED, "Cc": CONTROL, "Cf": CONTROL, "Co": CONTROL, "Cs": CONTROL,
    "Ll": LETTER, "Lm": LETTER, "Lo": LETTER, "Lt": LETTER, "Lu": LETTER,
    "Mc": MARK, "Me": MARK, "Mn": MARK,
    "Nd": NUMBER, "Nl": NUMBER, "No": NUMBER,
    "Pc": PUNCT, "Pd": PUNCT, "Pe": PUNCT, "Pf": PUNCT, "Pi": PUNCT, "Po": PUNCT, "Ps": PUNCT,
    "Sc": SYMBOL, "Sk": SYMBOL, "Sm": SYMBOL, "So": SYMBOL,
    "Zl": SEPARATOR, "Zp": SEPARATOR, "Zs": SEPARATOR,
}

# White_Space (PropList.txt); the same list llama.cpp's generator uses.
WHITESPACE = (list(range(0x0009, 0x000D + 1)) + list(range(0x2000, 0x200A + 1)) +
              [0x0020, 0x0085, 0x00A0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000])

# Added in Unicode 15.1 (release notes): 627 characters.
ADDED_15_1 = ([(c, "Lo") for c in range(0x2EBF0, 0x2EE5D + 1)] +
              [(c, "So") for c in (0x2FFC, 0x2FFD, 0x2FFE, 0x2FFF, 0x31EF)])


def from_file(path):
    cat = ["Cn"] * MAX
    lower = {}
    first = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            cp, name, gc = int(fields[0], 16), fields[1], fields[2]
            if name.endswith(", First>"):
                first = cp
                continue
            if name.endswith(", Last>"):
                for c in range(first, cp + 1):
                    cat[c] = gc
                first = None
                continue
            cat[cp] = gc
            if fields[13]:
                lower[cp] = int(fields[13], 16)
    return cat, lower


def from_module():
    cat = [unicodedata.category(chr(c)) for c in range(MAX)]
    lower = {}
    for c in range(MAX):
        lc = chr(c).lower()
        if len(lc) == 1 and lc != chr(c):
            lower[c] = ord(lc)
    return cat, lower


def version_of(cat):
    if cat[0x2EBF0] == "Lo":
        return "15.1"
    if cat[0x31350] == "Lo":   # CJK extension H, new in 15.0
        return "15.0"
    return "older than 15.0"


def main():
    if len(sys.argv) > 1:
        cat, lower = from_file(sys.argv[1])
        source = "UnicodeData.txt"
    else:
        cat, lower = from_module()
        source = "Python unicodedata " + unicodedata.unidata_version
    version = version_of(cat)
    if version == "15.0":
        for c, gc in ADDED_15_1:
            assert cat[c] == "Cn", hex(c)
            cat[c] = gc
        version = "15.0 + the 15.1 additions"
    elif version != "15.1":
        sys.exit("gen-unicode.py: %s has Unicode %s; need 15.0 or 15.1 "
                 "(give /usr/share/unicode/UnicodeData.txt from Debian's unicode-data)"
                 % (source, version))
    # No upper-case or title-case form of a non-ASCII letter lower-cases to
    # one of the letters of the contractions.
    for c, lc in lower.items():
        if c >= 0x80 and lc < 0x80:
            assert chr(lc) not in "stmdrevlSTMDREVL", hex(c)

    runs = []
    prev = None
    for c in range(MAX):
        fl = CAT_FLAG[cat[c]]
        if fl != prev:
            runs.append((c, fl))
            prev = fl
    out = sys.stdout
    out.write("/* unicode_data.c - generated by scripts/gen-unicode.py from %s\n"
              " * (Unicode %s), the tables of llama.cpp's unicode-data.cpp. Do not edit. */\n"
              % (source, version))
    out.write('#include "unicode.h"\n\n')
    out.write("/* Runs of equal category flags: a run starts at .first and ends where the\n"
              " * next begins; the last entry is {0x110000, 0}. */\n")
    out.write("const struct ntx_unicode_run ntx_unicode_runs[] = {\n")
    runs.append((MAX, 0))
    for i in range(0, len(runs), 4):
        out.write("\t" + " ".join("{ 0x%06X, 0x%02X }," % r for r in runs[i:i + 4]) + "\n")
    runs.pop()
    out.write("};\n")
    out.write("const int ntx_unicode_n_runs = %d;\n\n" % (len(runs) + 1))
    out.write("/* White_Space, ascending. */\n")
    out.write("const uint32_t ntx_unicode_whitespace[] = {\n")
    ws = sorted(WHITESPACE)
    for i in range(0, len(ws), 8):
        out.write("\t" + ", ".join("0x%04X" % c for c in ws[i:i + 8]) + ",\n")
    out.write("};\n")
    out.write("const int ntx_unicode_n_whitespace = %d;\n" % len(ws))


if __name__ == "__main__":
    main()
