#!/usr/bin/python3
"""Put STK_EXPORT in front of every public function declaration (and the
extern data) of include/stoker/*.h. Idempotent: run it again after adding
declarations to a header. Usage: apply_export.py include/stoker/*.h"""
import re
import sys

SKIP = ("#", "/", " ", "\t", "}", "{", "typedef", "union", "STK_EXPORT", "extern \"C\"")


def process(text):
    out, lines, i = [], text.split("\n"), 0
    in_comment = False
    while i < len(lines):
        line = lines[i]
        s = line
        if in_comment:
            out.append(line)
            if "*/" in line:
                in_comment = False
            i += 1
            continue
        if s.startswith("/*") and "*/" not in s:
            in_comment = True
            out.append(line)
            i += 1
            continue
        decl = s and "STK_EXPORT" not in s and not s.startswith(SKIP) and not re.match(r"(struct|enum)\s+\w*\s*\{", s) \
            and not re.match(r"struct\s+\w+\s*;", s)
        if decl:
            # gather the statement to its ';' (or a '{': a definition)
            j, stmt = i, s
            while ";" not in stmt and "{" not in stmt and j + 1 < len(lines):
                j += 1
                stmt += lines[j]
            if "(" in stmt and ";" in stmt and "{" not in stmt.split(";")[0]:
                out.append("STK_EXPORT " + line)
                i += 1
                continue
            if stmt.startswith("extern ") and ";" in stmt:
                out.append("extern STK_EXPORT " + line[len("extern "):])
                i += 1
                continue
        out.append(line)
        i += 1
    return "\n".join(out)


for path in sys.argv[1:]:
    with open(path) as f:
        t = f.read()
    n = process(t)
    if n != t:
        with open(path, "w") as f:
            f.write(n)
