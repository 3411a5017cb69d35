#!/usr/bin/env bash
# The pictures of `strata place --svg` and `strata sched --svg`, read back as XML (issue 17):
# valid XML when host and switch names hold & and <; the placement's group table says what
# `place --json` says of each group's span; the simulation has one lane per policy, each its own
# colour and band, each drawn from time 0 to its makespan with as many steps early in the run as
# late (the early hours used to be thinned to a sample or two); both render with rsvg-convert.
#
#   bash tests/cli/pictures.sh path/to/strata
#
# Needs python3 (to parse the SVG); exits 77 (skipped, with the reason) without it. rsvg-convert
# is optional: without it the render check says so and is not counted.
set -u

NAME=pictures
. "$(dirname "$0")/lib/check.sh"
command -v python3 >/dev/null || { echo "skip: python3 is needed to parse the SVG"; exit 77; }
D=$ROOT/data/sched
xml_ok() { python3 -c 'import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])' "$1" 2>"$TMP/err"; }
py() { python3 "$@" 2>"$TMP/err"; }

# Names with & and < in hosts and switches, one failed host, a busy one.
cat >"$TMP/names.conf" <<'EOF'
SwitchName=r&d1 Nodes=a&b[01-04]
SwitchName=r<2 Nodes=c<d[01-04]
SwitchName=r3 Nodes=e[01-04]
SwitchName=r4 Nodes=f[01-04]
SwitchName=z&1 Switches=r&d1,r<2
SwitchName=z2 Switches=r3,r4
SwitchName=top Switches=z&1,z2
EOF
printf 'c<d03 failed\ne01 busy\n' >"$TMP/names.state"
PLACE=(--slurm "$TMP/names.conf" --cluster "$D/small-levels.json" --gpus-per-host 4 --state "$TMP/names.state"
    --tp 4 --pp 2 --dp 2)
run place "${PLACE[@]}" --svg "$TMP/place.svg"
check "place --svg with names holding & and <" test "$rc" -eq 0
check "place: the picture is valid XML" xml_ok "$TMP/place.svg"
run place "${PLACE[@]}" --json
cp "$TMP/out" "$TMP/place.json"
cat >"$TMP/spans.py" <<'EOF'
# The group table of the picture against `place --json`: a row per dimension with more than one
# member, each span cell equal to cost.group_span[dim][level].
import json, sys, xml.dom.minidom
svg = xml.dom.minidom.parse(sys.argv[1])
spans = json.load(open(sys.argv[2]))["cost"]["group_span"]
rows = [g for g in svg.getElementsByTagName("g") if g.getAttribute("class") == "group"]
dims = [g.getAttribute("data-dim") for g in rows]
assert dims == ["tp", "pp", "dp", "job"], dims
seen = 0
for g in rows:
    d = g.getAttribute("data-dim")
    for t in g.getElementsByTagName("text"):
        if t.getAttribute("class") == "span" and d != "job":
            want = spans[d][t.getAttribute("data-level")]
            got = int(t.firstChild.data)
            assert got == want, (d, t.getAttribute("data-level"), got, want)
            seen += 1
assert seen == 3 * 3, seen  # tp, pp, dp x host, leaf, spine
EOF
check "place: the group table shows each group's span as --json gives it" \
    py "$TMP/spans.py" "$TMP/place.svg" "$TMP/place.json"

SMALL=(--slurm "$D/topology.conf" --cluster "$D/small-levels.json" --gpus-per-host 4)
run sched "${SMALL[@]}" --jobs 200 --failures 6 --seed 3 --json --svg "$TMP/sched.svg"
check "sched --svg" test "$rc" -eq 0
cp "$TMP/out" "$TMP/sched.json"
check "sched: the picture is valid XML" xml_ok "$TMP/sched.svg"
cat >"$TMP/lanes.py" <<'EOF'
# One lane per policy of the report, in its own band and colour; each lane's steps run from time 0
# (the frame's left edge) to its policy's makespan on the shared axis, with a step every sample
# width, as many in the first quarter of the axis as the run's share of it.
import json, re, sys, xml.dom.minidom
svg = xml.dom.minidom.parse(sys.argv[1])
pol = {p["policy"]: p for p in json.load(open(sys.argv[2]))["policies"]}
lanes = [g for g in svg.getElementsByTagName("g") if g.getAttribute("class") == "lane"]
assert sorted(g.getAttribute("data-policy") for g in lanes) == sorted(pol), "a lane per policy"
tmax = max(p["makespan_s"] for p in pol.values())
bands, colours = [], set()
for g in lanes:
    frame = [r for r in g.getElementsByTagName("rect") if r.getAttribute("class") == "frame"][0]
    fx, fy = float(frame.getAttribute("x")), float(frame.getAttribute("y"))
    fw, fh = float(frame.getAttribute("width")), float(frame.getAttribute("height"))
    bands.append((fy, fy + fh))
    path = [p for p in g.getElementsByTagName("path") if p.getAttribute("class") == "util"][0]
    colours.add(path.getAttribute("fill"))
    pts = [(float(x), float(y)) for x, y in re.findall(r"(-?[\d.]+),(-?[\d.]+)", path.getAttribute("d"))]
    xs = [x for x, _ in pts]
    assert all(fy - 0.01 <= y <= fy + fh + 0.01 for _, y in pts), "the steps stay in the lane"
    mk = pol[g.getAttribute("data-policy")]["makespan_s"]
    assert abs(min(xs) - fx) < 0.5, ("starts at time 0", min(xs), fx)
    assert abs(max(xs) - (fx + fw * mk / tmax)) < 0.5, ("ends at the makespan", max(xs))
    steps = sorted(set(round(x, 1) for x in xs))
    early = [x for x in steps if x < fx + fw * mk / tmax / 4]
    assert len(steps) >= 20 and len(early) >= len(steps) / 4 - 2, (len(early), len(steps))
bands.sort()
assert all(a[1] <= b[0] for a, b in zip(bands, bands[1:])), "lanes do not overlap"
assert len(colours) == len(lanes), "a colour per lane"
EOF
check "sched: a lane per policy, apart, each from 0 to its makespan, early hours drawn" \
    py "$TMP/lanes.py" "$TMP/sched.svg" "$TMP/sched.json"

if command -v rsvg-convert >/dev/null; then
    check "rsvg-convert renders both pictures" \
        bash -c "rsvg-convert -o '$TMP/place.png' '$TMP/place.svg' 2>'$TMP/err' &&
                 rsvg-convert -o '$TMP/sched.png' '$TMP/sched.svg' 2>>'$TMP/err' &&
                 [ -s '$TMP/place.png' ] && [ -s '$TMP/sched.png' ]"
else
    echo "not counted: rsvg-convert is not installed, the pictures were not rendered"
fi

finish
