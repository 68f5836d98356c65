#!/usr/bin/env bash
# test_svg.sh — flame graph SVGs against real consumers: xmllint says each is
# well-formed XML; a Python reading of the SVG (xml.etree) finds one frame
# per root-first label path of the trace's folded stacks (+ the root "all",
# less frames under the minimum width) with the folded counts; diffs colour
# grown frames red, shrunk ones blue, and a profile against itself neutral;
# headless Chromium (svg_check.mjs) renders, hovers, zooms and searches.
# Screenshots land in BUILD_DIR (svg_demo*.png, svg_diff*.png).
# usage: test_svg.sh CLI SOURCE_DIR BUILD_DIR (exit 77, skipped, when its tools or
# BUILD_DIR/consumers are absent: see require.sh)
set -euo pipefail
cli="$1" src="$2" build="$3"
here="$src/tests/consumers"
source "$here/require.sh"
require_cmd xmllint python3 node
require_file "$build/consumers/node_modules/playwright-core"
fixtures="$src/tests/fixtures/relay-compat"
out="$build/svg-consumer"
mkdir -p "$out"

# frames_match SVG FOLDED [DIFF]: the SVG's frames are exactly the label
# paths of FOLDED (prefixes of its stacks) at least 0.1 px wide, with the
# folded counts; DIFF=diff also prints each frame's fill.
frames_match() {
  python3 - "$@" <<'EOF'
import sys, xml.etree.ElementTree as ET
svg_path, folded_path = sys.argv[1], sys.argv[2]
ns = {'s': 'http://www.w3.org/2000/svg'}
root = ET.parse(svg_path).getroot()
avail = float(root.get('data-avail'))
frames = []
for g in root.iter('{http://www.w3.org/2000/svg}g'):
    if g.get('class') != 'f':
        continue
    title = g.find('s:title', ns).text
    frames.append(dict(name=title[:title.rindex(' (')], s=int(g.get('data-s')), n=int(g.get('data-n')),
                       d=int(g.get('data-d')), w=float(g.find('s:rect', ns).get('width')),
                       fill=g.find('s:rect', ns).get('fill')))
# a frame's path: its ancestors are the frames one level down holding its samples
def path(f):
    if f['d'] == 0:
        return (f['name'],)
    up = [p for p in frames if p['d'] == f['d'] - 1 and p['s'] <= f['s'] and f['s'] + f['n'] <= p['s'] + p['n']]
    assert len(up) == 1, f
    return path(up[0]) + (f['name'],)
got = {path(f): f for f in frames}
assert len(got) == len(frames), 'two frames share a label path'

want, total = {('all',): 0}, 0
for line in open(folded_path, encoding='utf-8'):
    stack, count = line.rstrip('\n').rsplit(' ', 1)
    count = int(count)
    total += count
    want[('all',)] += count
    if stack == '[no frames]':
        continue
    p = ('all',)
    for name in stack.split(';'):
        p += (name,)
        want[p] = want.get(p, 0) + count
drawn = {p: c for p, c in want.items() if len(p) == 1 or c * avail / max(total, 1) >= 0.1}
assert set(got) == set(drawn), f'frames {sorted(set(got) ^ set(drawn))[:5]} differ'
for p, c in drawn.items():
    f = got[p]
    assert f['n'] == c, f'{p}: {f["n"]} samples, folded says {c}'
    if len(p) > 1:
        assert abs(f['w'] - c * avail / total) < 0.006, f'{p}: width {f["w"]}'
print(f'{svg_path}: {len(frames)} frames = {len(drawn)} label paths of the folded stacks (with the root), '
      f'{len(want) - len(drawn)} under 0.1 px; counts and widths match')
if len(sys.argv) > 3:
    for p, f in sorted(got.items()):
        print('  ' + ';'.join(p) + ' ' + f['fill'])
EOF
}

svg_for() { # svg_for NAME TRACE...: convert, check with xmllint
  local name="$1"; shift
  "$cli" convert -f svg -o "$out/$name.svg" "$@"
  xmllint --noout "$out/$name.svg"
  echo "ok: $name.svg is well-formed XML ($(wc -c < "$out/$name.svg") bytes)"
}

# 1. The demo trace (all threads; one thread as an icicle) and two Relay
# fixtures, against their folded stacks.
svg_for demo "$src/examples/demo.pftrace"
"$cli" convert -f folded -o "$out/demo.folded" "$src/examples/demo.pftrace"
frames_match "$out/demo.svg" "$out/demo.folded"
svg_for demo-worker --thread worker-2 --reverse "$src/examples/demo.pftrace"
"$cli" convert -f folded --thread worker-2 -o "$out/demo-worker.folded" "$src/examples/demo.pftrace"
frames_match "$out/demo-worker.svg" "$out/demo-worker.folded"
for fx in minimal multi_sequence; do
  svg_for "$fx" "$fixtures/$fx.pftrace"
  "$cli" convert -f folded -o "$out/$fx.folded" "$fixtures/$fx.pftrace"
  frames_match "$out/$fx.svg" "$out/$fx.folded"
done
# minimal.pftrace holds two samples of main -> foo: all, main, foo.
n=$(grep -c '<g class="f"' "$out/minimal.svg")
[ "$n" -eq 3 ] || { echo "FAIL: minimal.svg has $n frames, want 3 (all, main, foo)"; exit 1; }
echo "ok: minimal.svg draws all, main, foo"

# 2. Diffs: base has new_func twice; now has new_func once and old_func once.
"$cli" diff -o "$out/diff.svg" "$fixtures/incremental_state_reset.pftrace" \
  "$fixtures/incremental_state_reset_before_after.pftrace"
xmllint --noout "$out/diff.svg"
echo "ok: diff.svg is well-formed XML"
"$cli" convert -f folded -o "$out/diff-now.folded" "$fixtures/incremental_state_reset_before_after.pftrace"
fills=$(frames_match "$out/diff.svg" "$out/diff-now.folded" diff)
echo "$fills"
python3 - "$fills" <<'EOF'
import re, sys
fill = {}
for line in sys.argv[1].splitlines()[1:]:
    path, rgb = line.split()
    fill[path] = tuple(map(int, re.findall(r'\d+', rgb)))
r, g, b = fill['all;old_func']
assert r > b + 80, f'old_func grew from 0% to 50%: want red, got {fill["all;old_func"]}'
r, g, b = fill['all;new_func']
assert b > r + 80, f'new_func shrank from 100% to 50%: want blue, got {fill["all;new_func"]}'
r, g, b = fill['all']
assert r == g == b, f'the root never changes: want neutral, got {fill["all"]}'
print('ok: diff colours: old_func red (grew), new_func blue (shrank), root neutral')
EOF
"$cli" diff -o "$out/diff-self.svg" "$src/examples/demo.pftrace" "$src/examples/demo.pftrace"
xmllint --noout "$out/diff-self.svg"
total=$(grep -c '<g class="f"' "$out/diff-self.svg")
neutral=$(grep -oE 'fill="rgb\(([0-9]+),\1,\1\)"/><text' "$out/diff-self.svg" | wc -l)
[ "$total" -gt 100 ] && [ "$neutral" -eq "$total" ] \
  || { echo "FAIL: demo against itself: $neutral of $total frames neutral"; exit 1; }
grep -q '; +0.00 pp)</title>' "$out/diff-self.svg"
echo "ok: demo against itself: well-formed, every frame neutral, +0.00 pp"

# 3. In a browser.
node "$here/svg_check.mjs" "$build/consumers" "$out/demo.svg" "$build/svg_demo.png" 'Module1[0-9]\.'
node "$here/svg_check.mjs" "$build/consumers" "$out/diff.svg" "$build/svg_diff.png" 'old'
echo "svg consumers: all checks passed"
