#!/usr/bin/env python3
"""Lengths of the non-test functions under src/ (issue #30 item 4).

Counted as the issue counts them: from each `fn` line to its matching closing brace, by
brace matching that skips strings, chars and comments; code under `#[cfg(test)]` modules
and `#[test]` functions is excluded. Prints the functions over 100 lines, longest first,
and a summary line: `over 100: N, over 150: M, over 200: K`.

    python3 benches/fn_lengths.py [--over 100] [--json]
"""
import json, os, re, sys

FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"[^"]*"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)')


def strip(src):
    """The source with strings, chars and comments blanked (newlines kept)."""
    out, i, n = [], 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith('//', i):
            j = src.find('\n', i)
            j = n if j < 0 else j
            out.append(' ' * (j - i)); i = j
        elif src.startswith('/*', i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith('/*', j): depth += 1; j += 2
                elif src.startswith('*/', j): depth -= 1; j += 2
                else: j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == 'r' and re.match(r'r#*"', src[i:i + 10]) and (i == 0 or not (src[i-1].isalnum() or src[i-1] == '_')):
            m = re.match(r'r(#*)"', src[i:])
            close = '"' + m.group(1)
            j = src.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == '\\' else 1
            j += 1
            out.append(re.sub(r'[^\n]', ' ', src[i:j])); i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", src[i:i + 12])
            if m:
                out.append(' ' * len(m.group(0))); i += len(m.group(0))
            else:
                out.append(c); i += 1
        else:
            out.append(c); i += 1
    return ''.join(out)


def functions(path):
    text = strip(open(path, encoding='utf-8').read())
    lines = text.split('\n')
    # Line ranges of #[cfg(test)] items (modules or functions) and #[test] functions.
    skip = set()
    found = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if re.match(r'^\s*#\[(cfg\(test\)|test)\]', line):
            # the item that follows: skip to its matching brace
            j = i + 1
            while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
                j += 1
            end = match(lines, j)
            skip.update(range(i, end + 1))
            i = end + 1
            continue
        m = FN.match(line)
        if m and i not in skip:
            j = i
            while j < len(lines) and '{' not in lines[j] and ';' not in lines[j]:
                j += 1
            if j < len(lines) and '{' in lines[j]:
                end = match(lines, j)
                found.append((m.group(7), i + 1, end - i + 1))
        i += 1
    return found


def match(lines, start):
    depth, seen = 0, False
    for k in range(start, len(lines)):
        for ch in lines[k]:
            if ch == '{': depth += 1; seen = True
            elif ch == '}': depth -= 1
        if seen and depth <= 0:
            return k
        if not seen and lines[k].rstrip().endswith(';'):
            return k
    return len(lines) - 1


def main():
    over = 100
    if '--over' in sys.argv:
        over = int(sys.argv[sys.argv.index('--over') + 1])
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')
    rows = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith('.rs'):
                p = os.path.join(d, f)
                for name, line, n in functions(p):
                    rows.append((n, os.path.relpath(p, os.path.join(root, '..')), line, name))
    rows.sort(reverse=True)
    if '--json' in sys.argv:
        print(json.dumps([{'lines': n, 'file': p, 'line': l, 'fn': f} for n, p, l, f in rows if n > over]))
        return
    for n, p, l, f in rows:
        if n > over:
            print(f'{n:5}  {p}:{l}  {f}')
    c = lambda k: sum(1 for r in rows if r[0] > k)
    print(f'functions: {len(rows)}, over 100: {c(100)}, over 150: {c(150)}, over 200: {c(200)}')


if __name__ == '__main__':
    main()
