"""function_lengths.py [ROOT [LIMIT]]: the functions in ROOT/src longer than LIMIT lines (default 80), one
line each: length, path:line, name.

Functions in src/ and their lengths (signature's first line to closing brace), by brace matching
over the text with comments and literals blanked. Namespace, class/struct/enum and extern blocks are
scopes; a brace whose header holds '(' at namespace/class scope opens a function; anything inside a
function (lambdas, blocks) belongs to it."""
import re, sys
from pathlib import Path

def blank(text):
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i); j = n if j < 0 else j
            out.append(" " * (j - i)); i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2); j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j])); i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i-1].isalnum() or text[i-1]=='_')):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i)
            j = end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i+2:j]) ); i = j
        elif c == '"' or (c == "'" and not (i > 0 and text[i-1].isalnum())):
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c); i = j + 1
        else:
            out.append(c); i += 1
    return "".join(out)

def functions(path):
    text = blank(path.read_text(errors="replace"))
    stack = []  # ('ns'|'class'|'fn'|'block'|'data', start_line, name)
    last = 0
    res = []
    line = 1
    for i, c in enumerate(text):
        if c == "\n": line += 1
        if c in ";{}":
            if c == "{":
                header = text[last:i]
                in_fn = any(k in ("fn", "data") for k, *_ in stack)
                h = " ".join(header.split())
                if in_fn:
                    stack.append(("block", line, ""))
                elif re.search(r"\bnamespace\b|extern\s*\"", h):
                    stack.append(("ns", line, ""))
                elif re.search(r"\b(class|struct|union|enum)\b", h) and "(" not in h.split("=")[0]:
                    stack.append(("class", line, ""))
                elif "(" in h and not re.search(r"=\s*$", h):
                    # start line: first non-blank line of header
                    pre = text[last:i]
                    lead = len(pre) - len(pre.lstrip())
                    start = line - pre[lead:].count("\n")
                    name = re.findall(r"([~\w:]+)\s*\(", h)
                    stack.append(("fn", start, name[0] if name else h[:40]))
                else:
                    stack.append(("data", line, h[-40:]))
            elif c == "}":
                if stack:
                    k, start, name = stack.pop()
                    if k == "fn":
                        res.append((line - start + 1, start, name))
            last = i + 1
    return res

root = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 80
rows = []
for p in sorted((root / "src").rglob("*")):
    if p.suffix in (".cpp", ".hpp", ".h", ".cu", ".cuh"):
        for n, start, name in functions(p):
            if n > limit:
                rows.append((n, f"{p.relative_to(root)}:{start}", name))
for r in sorted(rows, reverse=True):
    print(*r)
