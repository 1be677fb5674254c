#!/usr/bin/env python3
# The per-pod-list table of docs/BENCHMARKS.md, "DRA dynamic mode's steering in the
# replay (issue 37)": hack/replay-dynamic-table.py DIR/score.json, where DIR holds the
# replays (DIR/<list>-seed<n>/replay.json) and score.json is
# `replayscore -subject migflex-dynamic -against dra-first-fit -json DIR/score.json DIR`.
import json, sys, glob, os, collections
score = json.load(open(sys.argv[1]))
root = os.path.dirname(sys.argv[1])
served = collections.defaultdict(lambda: collections.defaultdict(list))  # (trace) -> (policy, load) -> [share]
wait = collections.defaultdict(lambda: collections.defaultdict(list))
fill = collections.defaultdict(lambda: collections.defaultdict(list))
def short(t):
    t = t.replace('openb_pod_list_', '').replace('.csv', '').replace(' resampled ', ' ')
    return t.split(' (seed')[0].replace('default gpushare', 'gpushare').replace('default multigpu', 'multigpu')
for f in glob.glob(os.path.join(root, '*', 'replay.json')):
    r = json.load(open(f))
    t = short(r['trace']['file'])
    for l in r['loads']:
        for res in l['results']:
            served[t][(res['policy'], l['load'])].append(res['servedShare'])
            wait[t][(res['policy'], l['load'])].append(res['waitP99'])
    for res in r['fgd']['results']:
        fill[t][res['policy']].append(res['allocatedAtFirstFailure'])
out = collections.defaultdict(lambda: [0, 0, 0, 0.0, 0])
for run in score['runs']:
    t = short(run['trace'])
    for p in run['points']:
        if p['load'] < 1:
            continue
        o = out[t]
        o[{'win': 0, 'tie': 1, 'loss': 2}[p['outcome']]] += 1
        o[3] += p['served'] - p['best']
        o[4] += 1
pol = ['dra-first-fit', 'hami-dynamic-mig', 'migflex-dynamic']
mean = lambda v: sum(v) / len(v)
print('| pod list | served at load 1.5: first fit / HAMi / migflex-dynamic | at load 2 | migflex-dynamic − first fit, mean at load ≥ 1 (points) | wins / ties / losses | fill at first failure, least: first fit / migflex-dynamic | p99 wait at load 1, most: first fit / migflex-dynamic |')
print('| --- | ---: | ---: | ---: | ---: | ---: | ---: |')
order = ['gpushare40', 'gpushare80', 'gpushare=0.4', 'gpushare=0.6', 'gpushare=0.8', 'gpushare=1', 'default', 'multigpu30', 'multigpu=0.3', 'multigpu=0.4', 'multigpu=0.5']
for t in sorted(out, key=lambda x: order.index(x) if x in order else 99):
    s = served[t]; o = out[t]
    f = lambda load: ' / '.join('%.2f%%' % (100 * mean(s[(p, load)])) for p in pol)
    print('| %s | %s | %s | %+.3f | %d / %d / %d | %.1f%% / %.1f%% | %.0f s / %.0f s |' % (
        t, f(1.5), f(2), 100 * o[3] / o[4], o[0], o[1], o[2],
        100 * min(fill[t]['dra-first-fit']), 100 * min(fill[t]['migflex-dynamic']),
        max(wait[t][('dra-first-fit', 1)]), max(wait[t][('migflex-dynamic', 1)])))
