#!/usr/bin/env bash
# The user guide (docs/book) builds without a warning, and every relative link of its chapters
# leads somewhere: the file exists and, for `file.md#anchor` or `#anchor`, the heading does
# (ids as mdbook makes them: the heading's text lower-cased, whitespace to '-', other
# punctuation dropped, a repeated id numbered -1, -2...). Exit status 1 names each broken link.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
book="$root/docs/book"

if [[ "${1:-}" != "--links-only" ]]; then
  log=$(mktemp)
  if ! mdbook build "$book" >"$log" 2>&1; then
    cat "$log"; echo "mdbook build failed"; rm -f "$log"; exit 1
  fi
  if grep -Eiq '(^|[^a-z])(warn|warning|error)([^a-z]|$)' "$log"; then
    cat "$log"; echo "mdbook build wrote warnings"; rm -f "$log"; exit 1
  fi
  rm -f "$log"
fi

python3 - "$book/src" <<'PY'
import os, re, sys

src = sys.argv[1]
FENCE = re.compile(r'^\s*(```|~~~)')
HEADING = re.compile(r'^(#{1,6})\s+(.*?)\s*#*\s*$')
LINK = re.compile(r'(?<!\!)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')


def prose_lines(path):
    """The numbered lines of a markdown file outside fenced code blocks."""
    inside = False
    with open(path, encoding='utf-8') as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                inside = not inside
                continue
            if not inside:
                yield number, line


def text_of(heading):
    """A heading's text as mdbook renders it: links to their text, markup and HTML dropped."""
    text = re.sub(r'\[([^\]]*)\]\([^)]*\)', r'\1', heading)
    text = re.sub(r'<[^>]+>', '', text)
    return text.replace('`', '').replace('*', '')


def normalize(text):
    out = []
    for ch in text:
        if ch.isalnum() or ch in '_-':
            out.append(ch.lower())
        elif ch.isspace():
            out.append('-')
    return ''.join(out)


anchors = {}


def ids_of(path):
    if path not in anchors:
        seen, ids = {}, set()
        for _, line in prose_lines(path):
            m = HEADING.match(line)
            if not m:
                continue
            base = normalize(text_of(m.group(2)))
            n = seen.get(base, 0)
            seen[base] = n + 1
            ids.add(base if n == 0 else f'{base}-{n}')
        anchors[path] = ids
    return anchors[path]


broken = []
checked = 0
for folder, _, files in os.walk(src):
    for name in sorted(files):
        if not name.endswith('.md'):
            continue
        path = os.path.join(folder, name)
        for number, line in prose_lines(path):
            line = re.sub(r'`[^`]*`', '', line)
            for target in LINK.findall(line):
                if re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
                    continue  # http:, https:, mailto: are not this check's
                checked += 1
                file_part, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(folder, file_part)) if file_part else path
                where = f'{os.path.relpath(path, src)}:{number}: {target}'
                if not os.path.exists(dest):
                    broken.append(f'{where}: no such file')
                elif anchor:
                    if not dest.endswith('.md'):
                        broken.append(f'{where}: an anchor into a file that is not a chapter')
                    elif anchor not in ids_of(dest):
                        broken.append(f'{where}: no heading with the id `{anchor}`')
if broken:
    print('\n'.join(broken))
    print(f'{len(broken)} broken link(s) in docs/book/src')
    sys.exit(1)
print(f'docs/book/src: {checked} relative links, none broken')
PY
