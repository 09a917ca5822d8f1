#!/usr/bin/env python3
"""Checks the layering that docs/architecture.md states, by reading #include lines.

The page's layer table (rows "| N | `folder/` | `rankwise::ns` | ... |") is the
rule: a file under src/<folder>/ or include/rankwise/<folder>/ may include its
own folder and folders of a lower layer only; the launcher (src/launch/) may
include only the folders its row names and public headers; every folder of
src/ is in the table and every folder in the table exists; and at least 90 %
of the .cpp files under each folder declare the namespace the table gives it
(its own, a subfolder's nested one, or another namespace its row names).
Exit status 1 with one line per violation.
"""
import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..', '..')
ROOT = os.path.abspath(ROOT)
ROW = re.compile(r'^\|\s*(\d+|launcher)\s*\|\s*`([a-z_]+)/`\s*\|([^|]*)\|(.*)\|\s*$')
# Top-level public headers (include/rankwise/*.h) and the folder that implements each.
TOP_HEADERS = {'error': 'core', 'env': 'core', 'log': 'core', 'seed': 'core', 'device': 'core',
               'run_main': 'core', 'fabric': 'fabric'}


def read_table():
    text = open(os.path.join(ROOT, 'docs', 'architecture.md')).read()
    layers, namespaces, launcher_uses = {}, {}, set()
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        layer, folder, ns_cell, rest = m.groups()
        namespaces[folder] = re.findall(r'`(rankwise[a-z_:]*)`', ns_cell)
        if layer == 'launcher':
            layers[folder] = None
            launcher_uses = set(re.findall(r'uses `([a-z_]+)/`', rest))
        else:
            layers[folder] = int(layer)
    return layers, namespaces, launcher_uses


def folder_of(path):
    """(folder, public) of a repository path, or (None, _) outside the layout."""
    if path.startswith('include/rankwise/'):
        parts = path[len('include/rankwise/'):].split('/')
        if len(parts) == 1:
            name = parts[0][:-2]
            if name == 'rankwise':
                return 'umbrella', True
            return TOP_HEADERS.get(name, name), True
        return parts[0], True
    if path.startswith('src/'):
        parts = path.split('/')
        return (parts[1], False) if len(parts) > 2 else (None, False)
    return None, False


def main():
    layers, namespaces, launcher_uses = read_table()
    problems = []
    if not layers:
        problems.append('docs/architecture.md: no layer table found')
    src_folders = {d for d in os.listdir(os.path.join(ROOT, 'src'))
                   if os.path.isdir(os.path.join(ROOT, 'src', d))}
    for d in sorted(src_folders - set(layers)):
        problems.append(f'src/{d}/ is not in the layer table of docs/architecture.md')
    for d in sorted(set(layers) - src_folders):
        problems.append(f'docs/architecture.md names {d}/, which src/ does not have')
    for base in ('src', 'include'):
        for dirpath, _, files in os.walk(os.path.join(ROOT, base)):
            for name in sorted(files):
                if not name.endswith(('.h', '.cpp')):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), ROOT)
                if '/missing/' in path:
                    continue
                folder, _ = folder_of(path)
                if folder in (None, 'umbrella') or folder not in layers:
                    continue
                for n, line in enumerate(open(os.path.join(ROOT, path)), 1):
                    m = re.match(r'\s*#\s*include\s*"([^"]+)"', line)
                    if not m:
                        continue
                    inc = m.group(1)
                    target = 'include/' + inc if inc.startswith('rankwise/') else 'src/' + inc
                    other, public = folder_of(target)
                    if other is None or other == folder:
                        continue
                    if layers[folder] is None:  # the launcher
                        if not public and other not in launcher_uses:
                            problems.append(f'{path}:{n}: the launcher includes {inc}; it may include '
                                            f'only {", ".join(sorted(launcher_uses))}/ and public headers')
                        continue
                    if other == 'umbrella' or layers.get(other) is None or layers[other] >= layers[folder]:
                        problems.append(f'{path}:{n}: {folder}/ (layer {layers[folder]}) includes {inc} '
                                        f'({other}/, layer {layers.get(other)})')
    for folder, names in namespaces.items():
        cpps = []
        for dirpath, _, files in os.walk(os.path.join(ROOT, 'src', folder)):
            cpps += [os.path.join(dirpath, f) for f in files if f.endswith('.cpp')]
        if not cpps:
            continue
        sub = {}
        for c in cpps:
            rel = os.path.relpath(os.path.dirname(c), os.path.join(ROOT, 'src'))
            own = 'rankwise::' + rel.replace('/', '::')
            # the folder's namespace (a subfolder's nested in it), or another the table names
            allowed = [own] + [n for n in names if n != 'rankwise::' + folder]
            text = open(c).read()
            sub[c] = any(re.search(r'^namespace ' + re.escape(n) + (r' \{' if n == 'rankwise' else r'(::\w+)* \{'),
                                   text, re.M) for n in allowed)
        share = sum(sub.values()) / len(sub)
        if share < 0.9:
            bad = ', '.join(os.path.relpath(c, ROOT) for c, ok in sorted(sub.items()) if not ok)
            problems.append(f'src/{folder}/: {share:.0%} of its .cpp files declare their folder\'s '
                            f'namespace (at least 90 %): {bad}')
    for p in problems:
        print(p)
    print(f'{len(problems)} problem(s)' if problems else 'layers as docs/architecture.md states them')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
