"""Replays recorded programs with gpumem and compares with what PyTorch
reported (record.py's truths): every memory_stats key.

usage: compare.py GPUMEM DIR [--ignore-addresses]
       compare.py GPUMEM DIR --whatif BASE VARIANT...
The first form replays each NAME.pickle under its own truth's settings. The
second replays BASE.pickle under each VARIANT's settings (a run of the same
program under other settings that made the same alloc/free sequence) and
compares with VARIANT's truth, memory_summary included. A key may differ
only where the replay says why: a reported divergence, or the key named in
its inexact_keys ("said"); any other difference is silent, and fails. Prints
one line a case and "N passed, N failed"; exits 1 on a failure."""
import json, os, pickle, subprocess, sys


def args_for(t):
    a = ["--alloc-conf", t["alloc_conf"]]
    if t["per_process_memory_fraction"]:
        a += ["--device-memory", str(t["recorded_with"]["device_total_bytes"]),
              "--memory-fraction", repr(t["per_process_memory_fraction"])]
    return a


def replay(exe, trace, extra, fmt):
    p = subprocess.run([exe, "replay", trace, "-o", fmt] + extra, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        raise RuntimeError(p.stderr.strip()[-300:])
    return p.stdout


def sequence(path):
    s = pickle.load(open(path, "rb"))
    return [(e["action"], e["size"]) for e in s["device_traces"][0] if e["action"] in ("alloc", "free_completed")]


def main():
    exe, d, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    cases = []  # (name, trace, truth, extra, compare the summary)
    if rest[:1] == ["--whatif"]:
        base = os.path.join(d, rest[1] + ".pickle")
        for v in rest[2:]:
            if sequence(os.path.join(d, v + ".pickle")) != sequence(base):
                print(f"skip {v}: another alloc/free sequence than {rest[1]}")
                continue
            cases.append((f"{rest[1]} as {v}", base, json.load(open(os.path.join(d, v + ".truth.json"))), [], True))
    else:
        extra = ["--ignore-addresses"] if "--ignore-addresses" in rest else []
        for f in sorted(os.listdir(d)):
            if f.endswith(".truth.json"):
                t = json.load(open(os.path.join(d, f)))
                cases.append((f[:-11], os.path.join(d, t["replay"]), t, extra, False))
    passed = failed = said = 0
    for name, trace, t, extra, summary in cases:
        a = args_for(t) + extra
        why = ""
        try:
            doc = json.loads(replay(exe, trace, a, "json"))
            got, inexact = doc["memory_stats"], doc.get("inexact_keys") or {}
            differ = [k for k, w in t["memory_stats"].items() if got.get(k) != w]
            if differ and doc.get("divergence"):
                why = "divergence reported"
            elif differ and all(k in inexact for k in differ):
                why = "inexact_keys: " + ", ".join(sorted(differ))
            bad = [] if why else [f"{k} want {t['memory_stats'][k]} got {got.get(k)}" for k in differ]
            if summary and not why and replay(exe, trace, a, "torch-summary") != t["memory_summary"]:
                bad.append("memory_summary differs")
        except Exception as e:  # no result is a failure
            bad = [f"no result: {e}"]
        if bad:
            failed += 1
            print(f"FAIL {name}: " + "; ".join(bad[:6]))
        elif why:
            passed += 1
            said += 1
            print(f"said {name}: {why}")
        else:
            passed += 1
            print(f"ok   {name}")
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
