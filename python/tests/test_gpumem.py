"""The installed wheel, as a user of it would use it: the API over the
command's JSON, the rich display, the errors, and the recording helpers
importable as top-level modules. Run by scripts/wheel_check.sh in a fresh
virtual environment with the wheel installed; GPUMEM_TESTDATA names the
recorded snapshots (testdata/pytorch)."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

import gpumem

DATA = os.environ["GPUMEM_TESTDATA"]


def fixture(name):
    return os.path.join(DATA, name)


def test_the_command_is_on_the_path():
    exe = os.path.join(sysconfig.get_path("scripts"), "gpumem")
    assert os.access(exe, os.X_OK)
    assert gpumem.binary() == exe
    assert shutil.which("gpumem", path=os.path.dirname(exe)) == exe
    v = gpumem.version()
    assert v["schema_version"] >= 1 and "version" in v


def test_replay_gives_pytorchs_figures():
    r = gpumem.replay(fixture("gpt2_varlen.pickle"))
    truth = json.load(open(fixture("gpt2_varlen.truth.json")))
    assert r.peak_reserved == truth["memory_stats"]["reserved_bytes.all.peak"]
    assert r.peak_allocated == truth["memory_stats"]["allocated_bytes.all.peak"]
    assert r["memory_stats"] == {k: r["memory_stats"][k] for k in truth["memory_stats"]}
    assert r.fits and r["divergence"] is None


def test_a_card_too_small_does_not_fit():
    r = gpumem.replay(fixture("seed_frag.pickle"), device_memory="30MiB")
    assert not r.fits
    assert r["oom"]["verdict"] in ("fragmentation", "shortage")


def test_settings_and_the_recorded_cap():
    capped = gpumem.replay(fixture("gpt2_varlen_capped95.pickle"))
    assert capped["inferred_cap"] is not None
    exp = gpumem.replay(fixture("gpt2_varlen.pickle"), alloc_conf="expandable_segments:True")
    assert exp["settings"] == "expandable_segments:True"


def test_bad_input_is_a_gpumem_error():
    with pytest.raises(gpumem.GpumemError) as e:
        gpumem.replay(fixture("gpt2_varlen.truth.json"))
    assert e.value.code == 2 and str(e.value).startswith("gpumem: error: ")
    with pytest.raises(gpumem.GpumemError):
        gpumem.replay(fixture("seed_frag.pickle"), device_memory="lots")


def test_rich_display():
    r = gpumem.replay(fixture("graph_convnet.pickle"))
    page = r._repr_html_()
    assert "peak reserved" in page and "<svg" in page and "1.39 GiB" in page
    assert "not settled: num_sync_all_streams" in page
    assert r._repr_markdown_().startswith("| | |")


def test_sweep_and_diff():
    s = gpumem.sweep(fixture("seed_frag.pickle"), device_memory=["64MiB", "1GiB"], jobs=1)
    assert s["rows"] and any(row["recorded"] for row in s["rows"])
    d = gpumem.diff(fixture("seed_frag.pickle"), fixture("multistream.pickle"))
    assert "delta" in d


def test_recording_helpers_import(tmp_path):
    # top-level modules, as their single files would be
    for m in ("gpumem_spool", "gpumem_hooks", "gpumem_trace_writer", "gpumem_record"):
        p = subprocess.run([sys.executable, "-c", f"import importlib.util as u; print(u.find_spec({m!r}).origin)"],
                           capture_output=True, text=True)
        assert p.returncode == 0 and p.stdout.strip().endswith(m + ".py"), p.stderr
    from gpumem_trace_writer import TraceWriter
    out = tmp_path / "t.trace"
    with TraceWriter(str(out)) as w:
        w.alloc(0x1000, 4 << 20)
        w.free(0x1000)
    r = gpumem.replay(out)
    assert r.peak_allocated == 4 << 20
