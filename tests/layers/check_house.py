#!/usr/bin/env python3
"""Checks two rules of docs/architecture.md's house style by reading the files.

A comment block (consecutive // or /// lines) in a public header
(include/rankwise/) is at most six lines: the contract; the story goes to the
docs page. No .h or .cpp file under src/ or include/ is over 500 lines.
Exit status 1 with one line per violation.
"""
import os
import sys

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..'))
MAX_COMMENT_LINES = 6
MAX_FILE_LINES = 500


def sources():
    for top in ('src', 'include'):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for name in sorted(files):
                if name.endswith(('.h', '.cpp')):
                    yield os.path.join(folder, name)


def long_comment_blocks(path, lines):
    run, start = 0, 0
    for number, line in enumerate(lines + [''], start=1):
        if line.strip().startswith('//'):
            start = start if run else number
            run += 1
            continue
        if run > MAX_COMMENT_LINES:
            yield f'{os.path.relpath(path, ROOT)}:{start}: a comment block of {run} lines (at most {MAX_COMMENT_LINES}; move the story to docs/)'
        run = 0


def main():
    problems = []
    for path in sources():
        lines = open(path, encoding='utf-8').read().splitlines()
        if len(lines) > MAX_FILE_LINES:
            problems.append(f'{os.path.relpath(path, ROOT)}: {len(lines)} lines (at most {MAX_FILE_LINES}; split it by concept)')
        if os.path.relpath(path, ROOT).startswith('include' + os.sep):
            problems.extend(long_comment_blocks(path, lines))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
