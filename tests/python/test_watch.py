"""Issue 35: `diffract watch RUN_DIR` over a run's checkpoints (the synthetic family's models laid out as
a training run; a real Trainer run is in test_watch_trained.py). The rows equal analyze/compare of each
checkpoint, a second watch computes nothing, a checkpoint being written is skipped then read, --follow
picks up new checkpoints, keeps deleted ones' rows and exits 130 on SIGINT, trends and alerts follow
their documented rules (recomputed here from the tables), and bad runs exit 2 with one line."""
import csv
import io
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

import diffract_spectral as diffract
from conftest import assert_input_error, binary, run

FAMILY = ("pretrained", "math", "code", "text")


def rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def layout(family, run_dir, names, models=FAMILY):
    """Copies the family's models into run_dir under `names` (checkpoints of a run)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    for name, model in zip(names, models):
        shutil.copytree(family / model, run_dir / name)
    return run_dir


def trainer_state(d: Path, step):
    (d / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))


def watch(run_dir, out, *extra, check=True):
    store = [] if "--store" in extra else ["--store", Path(out).parent / "watch-store.sqlite"]
    return run(["watch", run_dir, "--out", out, "--settle", "0", "--min-fit-size", "0", *store, *extra],
               check=check)


@pytest.fixture()
def run_dir(family_f32, tmp_path):
    return layout(family_f32, tmp_path / "run", ["step_0", "step_100", "step_200", "step_300"])


def test_rows_equal_analyze_and_compare_of_each_checkpoint(family_f32, run_dir, tmp_path):
    store = tmp_path / "s.sqlite"
    watch(run_dir, tmp_path / "w", "--base", family_f32 / "pretrained", "--store", store)
    metrics, compared = rows(tmp_path / "w" / "metrics.csv"), rows(tmp_path / "w" / "compare.csv")
    heads = rows(tmp_path / "w" / "heads.csv")
    for step, name in ((0, "step_0"), (100, "step_100"), (200, "step_200"), (300, "step_300")):
        a = tmp_path / f"a{step}"
        # Another store: computed afresh, not read back from the watch's.
        run(["analyze", run_dir / name, "--out", a, "--min-fit-size", "0", "--store", tmp_path / "other.sqlite"])
        mine = [{k: v for k, v in r.items() if k != "step"} for r in metrics if r["step"] == str(step)]
        assert mine == rows(a / "metrics.csv"), name
        c = tmp_path / f"c{step}"
        run(["compare", run_dir / name, "--base", family_f32 / "pretrained", "--out", c,
             "--store", tmp_path / "other.sqlite"])
        assert [{k: v for k, v in r.items() if k != "step"} for r in compared if r["step"] == str(step)] == \
            rows(c / "compare.csv")
        assert [{k: v for k, v in r.items() if k != "step"} for r in heads if r["step"] == str(step)] == \
            rows(c / "heads.csv")
    assert [r["status"] for r in rows(tmp_path / "w" / "checkpoints.csv")] == ["analysed"] * 4


def test_a_second_watch_computes_nothing(run_dir, tmp_path):
    store = tmp_path / "s.sqlite"
    first = watch(run_dir, tmp_path / "w", "--store", store)
    before = (tmp_path / "w" / "metrics.csv").read_text()
    assert "computed" in first.stderr and "nothing computed" not in first.stderr
    second = watch(run_dir, tmp_path / "w", "--store", store)
    assert second.stderr.count("nothing computed") == 4, second.stderr
    assert (tmp_path / "w" / "metrics.csv").read_text() == before
    assert {(r["status"], r["computed"]) for r in rows(tmp_path / "w" / "checkpoints.csv")} == {("reused", "0")}
    # A new checkpoint: only it is computed.
    shutil.copytree(run_dir / "step_100", run_dir / "step_400")
    (run_dir / "step_400" / "model.safetensors").write_bytes(
        (run_dir / "step_300" / "model.safetensors").read_bytes()[:0] + perturbed(run_dir / "step_100"))
    third = watch(run_dir, tmp_path / "w", "--store", store)
    assert third.stderr.count("nothing computed") == 4
    status = {r["step"]: r["status"] for r in rows(tmp_path / "w" / "checkpoints.csv")}
    assert status["400"] == "analysed"


def perturbed(model_dir, scale=1e-3, seed=0):
    """The bytes of model_dir's safetensors file with every float tensor perturbed."""
    st = pytest.importorskip("safetensors.numpy")
    rng = np.random.default_rng(seed)
    t = st.load_file(str(model_dir / "model.safetensors"))
    return st.save({k: (v + scale * rng.normal(size=v.shape)).astype(v.dtype) for k, v in t.items()})


def test_trainer_checkpoints_take_their_step_from_trainer_state(family_f32, tmp_path):
    r = layout(family_f32, tmp_path / "run", ["checkpoint-10", "checkpoint-20", "checkpoint-30"])
    trainer_state(r / "checkpoint-10", 10)
    trainer_state(r / "checkpoint-20", 20)
    # Weights present, trainer_state.json not yet: still being written (Trainer writes it last).
    p = watch(r, tmp_path / "w")
    cks = {c["name"]: c for c in rows(tmp_path / "w" / "checkpoints.csv")}
    assert cks["checkpoint-30"]["status"] == "skipped" and "trainer_state.json" in cks["checkpoint-30"]["note"]
    assert {x["step"] for x in rows(tmp_path / "w" / "metrics.csv")} == {"10", "20"}
    # Written: picked up, at the step trainer_state.json says.
    trainer_state(r / "checkpoint-30", 31)
    watch(r, tmp_path / "w")
    assert {x["step"] for x in rows(tmp_path / "w" / "metrics.csv")} == {"10", "20", "31"}
    assert p.returncode == 0


def test_a_truncated_file_is_skipped_then_read(family_f32, tmp_path):
    r = tmp_path / "run"
    r.mkdir()
    whole = (family_f32 / "math" / "model.safetensors").read_bytes()
    shutil.copy(family_f32 / "pretrained" / "model.safetensors", r / "model-step100.safetensors")
    (r / "model-step200.safetensors").write_bytes(whole[: len(whole) // 2])  # a write in progress
    p = watch(r, tmp_path / "w")
    assert "step 200" in p.stderr and "skipped" in p.stderr
    cks = {c["step"]: c for c in rows(tmp_path / "w" / "checkpoints.csv")}
    assert cks["200"]["status"] == "skipped" and cks["100"]["status"] == "analysed"
    (r / "model-step200.safetensors").write_bytes(whole)
    watch(r, tmp_path / "w")
    assert {x["step"] for x in rows(tmp_path / "w" / "metrics.csv")} == {"100", "200"}


def perturbed_in_place(data, scale, seed):
    """A safetensors file's bytes with every F32 tensor perturbed, header and size unchanged."""
    rng = np.random.default_rng(seed)
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = bytearray(data)
    for name, t in header.items():
        if name == "__metadata__" or t["dtype"] != "F32":
            continue
        a, b = (8 + n + o for o in t["data_offsets"])
        v = np.frombuffer(data[a:b], dtype="<f4")
        out[a:b] = (v + scale * rng.normal(size=v.shape)).astype("<f4").tobytes()
    return bytes(out)


def wait_for(predicate, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if predicate():
                return
        except (OSError, KeyError, StopIteration):
            pass
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_follow_picks_up_new_checkpoints_keeps_deleted_rows_and_stops_on_sigint(family_f32, tmp_path):
    r = layout(family_f32, tmp_path / "run", ["step_0"])
    out = tmp_path / "w"
    p = subprocess.Popen([binary(), "watch", r, "--out", out, "--follow", "--poll", "0.2", "--settle", "0.5",
                          "--store", tmp_path / "s.sqlite", "--quiet"], stderr=subprocess.PIPE, text=True)
    try:
        def statuses():
            return {c["step"]: c["status"] for c in rows(out / "checkpoints.csv")}
        wait_for(lambda: statuses().get("0") == "analysed")
        shutil.copytree(family_f32 / "math", r / "step_50")
        wait_for(lambda: statuses().get("50") == "analysed")
        shutil.rmtree(r / "step_0")  # save_total_limit
        wait_for(lambda: statuses().get("0") == "deleted")
        assert p.poll() is None  # still following
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130, err
    assert {x["step"] for x in rows(out / "metrics.csv")} == {"0", "50"}  # the deleted checkpoint's rows stay
    assert not list(tmp_path.glob("w.*"))  # no temporary directory left


def test_delta_only_keeps_the_head_updates(family_f32, run_dir, tmp_path):
    watch(run_dir, tmp_path / "full", "--base", family_f32 / "pretrained")
    watch(run_dir, tmp_path / "delta", "--base", family_f32 / "pretrained", "--delta-only")
    full, delta = rows(tmp_path / "full" / "heads.csv"), rows(tmp_path / "delta" / "heads.csv")
    assert len(full) == len(delta)
    for a, b in zip(full, delta):
        for k in ("step", "layer", "head", "update_norm", "relative_update"):
            assert float(a[k]) == pytest.approx(float(b[k]), rel=1e-9, abs=1e-12), k
    assert all(r["avg_l_agreement"] == "nan" for r in rows(tmp_path / "delta" / "compare.csv"))


def test_until_step_and_every(run_dir, tmp_path):
    watch(run_dir, tmp_path / "w", "--every", "200")
    assert {x["step"] for x in rows(tmp_path / "w" / "metrics.csv")} == {"0", "200"}
    watch(run_dir, tmp_path / "u", "--until-step", "150")
    assert {x["step"] for x in rows(tmp_path / "u" / "metrics.csv")} == {"0", "100"}


def test_trends_are_the_least_squares_line_of_each_unit(run_dir, tmp_path):
    watch(run_dir, tmp_path / "w")
    metrics = rows(tmp_path / "w" / "metrics.csv")
    trends = {(t["tensor"], t["head"], t["field"]): t for t in rows(tmp_path / "w" / "trends.csv")
              if t["source"] == "metrics"}
    checked = 0
    for tensor in sorted({m["tensor"] for m in metrics})[:6]:
        for field in ("stable_rank", "frob_norm", "pl_alpha"):
            pts = [(float(m["step"]), float(m[field])) for m in metrics if m["tensor"] == tensor and m["head"] == ""
                   and np.isfinite(float(m[field]))]
            if len(pts) < 2:
                continue
            t = trends[(tensor, "", field)]
            x, y = np.array(pts).T
            assert float(t["slope"]) == pytest.approx(np.polyfit(x, y, 1)[0], rel=1e-9, abs=1e-15)
            assert float(t["first"]) == y[0] and float(t["last"]) == y[-1]
            assert float(t["change"]) == pytest.approx(y[-1] - y[0], rel=1e-12, abs=1e-15)
            assert int(t["checkpoints"]) == len(pts)
            if field == "pl_alpha":
                crossed = [int(s) for s, v in zip(x, y) if any((v < thr) != (y[0] < thr) for thr in (2, 6))]
                assert t["crossed_step"] == (str(crossed[0]) if crossed else "")
            checked += 1
    assert checked >= 6


def expected_alerts(metrics, heads, low=2.0, high=6.0, jump=1.0, sr_jump=0.2, share=0.5):
    """The documented rules, written again here from the tables."""
    out = set()
    whole = {}
    for m in metrics:
        if m["head"] == "":
            whole.setdefault(m["tensor"], []).append(m)
    for tensor, series in whole.items():
        series.sort(key=lambda m: int(m["step"]))
        was_low = was_high = False
        prev = None
        for m in series:
            a = float(m["pl_alpha"])
            if a < low and not was_low:
                out.add((int(m["step"]), "over_fit", tensor))
            if a > high and not was_high:
                out.add((int(m["step"]), "under_trained", tensor))
            if not np.isnan(a):
                was_low, was_high = a < low, a > high
            if prev is not None:
                a0 = float(prev["pl_alpha"])
                if abs(a - a0) > jump:
                    out.add((int(m["step"]), "alpha_jump", tensor))
                s0, s = float(prev["stable_rank"]), float(m["stable_rank"])
                if s0 > 0 and abs(s - s0) / s0 > sr_jump:
                    out.add((int(m["step"]), "stable_rank_jump", tensor))
            prev = m
    was = False
    for step in sorted({int(h["step"]) for h in heads}):
        sq = sorted((float(h["update_norm"]) ** 2 for h in heads if int(h["step"]) == step), reverse=True)
        if not sum(sq) > 0:
            continue  # the base itself: no update to share
        top = max(1, (len(sq) + 9) // 10)
        now = sum(sq[:top]) / sum(sq) > share
        if now and not was:
            out.add((step, "head_concentration", ""))
        was = now
    return out


@pytest.mark.parametrize("thresholds", [[], ["--alpha-jump", "3", "--stable-rank-jump", "0.01", "--head-share", "0.2"]])
def test_alerts_follow_the_documented_rules(family_f32, run_dir, tmp_path, thresholds):
    watch(run_dir, tmp_path / "w", "--base", family_f32 / "pretrained", *thresholds)
    got = {(int(a["step"]), a["kind"], a["tensor"]) for a in rows(tmp_path / "w" / "alerts.csv")}
    kw = dict(zip(["jump", "sr_jump", "share"], [float(v) for v in thresholds[1::2]]))
    want = expected_alerts(rows(tmp_path / "w" / "metrics.csv"), rows(tmp_path / "w" / "heads.csv"), **kw)
    assert got == want
    assert got  # the synthetic run raises some


def test_python_watch_returns_the_tables(family_f32, run_dir, tmp_path):
    pd = pytest.importorskip("pandas")
    w = diffract.watch(run_dir, out=tmp_path / "w", base=family_f32 / "pretrained", settle=0, min_fit_size=0,
                       store=tmp_path / "s.sqlite")
    for name in ("metrics", "compare", "heads", "trends", "alerts", "checkpoints"):
        csv_df = pd.read_csv(tmp_path / "w" / f"{name}.csv")
        df = getattr(w, name)
        columns = list(csv_df.columns)
        if name == "heads":  # Python's rank counts from 1 = most important; the CSV's is rewind_order
            columns.insert(columns.index("rank") + 1, "rewind_order")
            assert list(df["rewind_order"]) == list(csv_df["rank"])
            n = csv_df.groupby(["step", "model"])["rank"].transform("size")
            assert list(df["rank"]) == list(n - csv_df["rank"])
        assert len(df) == len(csv_df) and list(df.columns) == columns, name
    assert sorted(w.metrics["step"].unique().tolist()) == [0, 100, 200, 300]


def test_adapter_checkpoints_are_read_as_base_plus_adapter(family_f32, tmp_path):
    r = tmp_path / "run"
    for step, model in ((5, "math"), (10, "code")):
        run(["edit", "truncate", "--base", family_f32 / "pretrained", "--model", family_f32 / model, "--rank", "2",
             "--as-lora", "--out", r / f"checkpoint-{step}", "--quiet"])
        trainer_state(r / f"checkpoint-{step}", step)
    watch(r, tmp_path / "w", "--base", family_f32 / "pretrained")
    cks = rows(tmp_path / "w" / "checkpoints.csv")
    assert [(c["step"], c["adapter"], c["status"]) for c in cks] == [("5", "1", "analysed"), ("10", "1", "analysed")]
    run(["analyze", f"{family_f32 / 'pretrained'}+{r / 'checkpoint-5'}", "--out", tmp_path / "a", "--min-fit-size",
         "0", "--store", tmp_path / "o.sqlite"])
    mine = [{k: v for k, v in x.items() if k not in ("step", "model")} for x in rows(tmp_path / "w" / "metrics.csv")
            if x["step"] == "5"]
    assert mine == [{k: v for k, v in x.items() if k != "model"} for x in rows(tmp_path / "a" / "metrics.csv")]


def test_bad_runs_exit_2_with_one_line(family_f32, tmp_path):
    empty = tmp_path / "empty"
    (empty / "runs").mkdir(parents=True)
    assert_input_error(watch(empty, tmp_path / "w", check=False), str(empty), "no checkpoints found")
    assert_input_error(watch(family_f32 / "math", tmp_path / "w", check=False), "one checkpoint")
    assert_input_error(watch(tmp_path / "nope", tmp_path / "w", check=False), "not a directory")
    # Mixed architectures.
    other = tmp_path / "other"
    run(["generate", "--out", other, "--dtype", "F32", "--layers", "3", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1", "--models",
         "pretrained"])
    mixed = layout(family_f32, tmp_path / "mixed", ["step_1"])
    shutil.copytree(other / "pretrained", mixed / "step_2")
    assert_input_error(watch(mixed, tmp_path / "w", check=False), "step_2", "not the architecture")
    # A step that repeats.
    twice = layout(family_f32, tmp_path / "twice", ["step_100"])
    shutil.copy(family_f32 / "math" / "model.safetensors", twice / "model-step100.safetensors")
    assert_input_error(watch(twice, tmp_path / "w", check=False), "step 100")
    # An unreadable trainer_state.json (not being written: older than --settle).
    bad = layout(family_f32, tmp_path / "bad", ["checkpoint-7"])
    (bad / "checkpoint-7" / "trainer_state.json").write_text("{not json")
    past = time.time() - 3600
    os.utime(bad / "checkpoint-7" / "trainer_state.json", (past, past))
    assert_input_error(watch(bad, tmp_path / "w", check=False), "trainer_state.json")
    # A step past 64 bits is no step: the entry is passed over, not a crash.
    huge = layout(family_f32, tmp_path / "huge", ["checkpoint-99999999999999999999999", "step_99999999999999999999"])
    assert_input_error(watch(huge, tmp_path / "w", check=False), "no checkpoints found")
    # Outputs that would overwrite what watch reads.
    good = layout(family_f32, tmp_path / "good", ["step_1"])
    assert_input_error(watch(good, good, check=False), "--out", "run directory")
    assert_input_error(watch(good, tmp_path, check=False), "--out", "run directory")
    assert_input_error(watch(good, good / "step_1" / "out", check=False), "--out", "step_1")
    assert_input_error(watch(good, family_f32 / "pretrained" / "w", "--base", family_f32 / "pretrained", check=False),
                       "--out", "pretrained")
    assert not (good / "step_1" / "out").exists()
    # Options.
    assert_input_error(watch(bad, tmp_path / "w", "--every", "0", check=False), "--every")
    assert_input_error(watch(bad, tmp_path / "w", "--alpha-low", "7", check=False), "--alpha-low")
    assert_input_error(watch(bad, tmp_path / "w", "--delta-only", check=False), "--delta-only", "--base")
    assert not (tmp_path / "w").exists()  # nothing half-written


def test_the_report_draws_trajectories_with_the_alerts(family_f32, run_dir, tmp_path):
    import html
    import re
    watch(run_dir, tmp_path / "w", "--base", family_f32 / "pretrained", "--head-share", "0.2")
    run(["report", tmp_path / "w", "--out", tmp_path / "r", "--format", "svg"])
    alerts = rows(tmp_path / "w" / "alerts.csv")
    drawn = 0
    for field in ("pl_alpha", "stable_rank"):
        svg = html.unescape((tmp_path / "r" / f"trajectory-{field}.svg").read_text())
        marked = set(re.findall(r"<title>(step [0-9.]+: [^<]*)</title>", svg))
        expected = {f"step {a['step']}: {a['message']}" for a in alerts if a["field"] == field}
        assert marked <= expected, marked - expected
        drawn += len(marked)
        panels = re.findall(r">layer (\d+)<", svg)
        assert sorted(set(panels)) == ["0", "1"]
    assert drawn  # the synthetic run's alerts on the roles drawn are marked
    heat = html.unescape((tmp_path / "r" / "head-importance-over-steps.svg").read_text())
    concentrated = {a["step"] for a in alerts if a["kind"] == "head_concentration"}
    assert concentrated
    assert set(re.findall(r">(\d+) ⚠<", heat)) == concentrated
    heads = rows(tmp_path / "w" / "heads.csv")
    cells = re.findall(r"<title>layer (\d+), head (\d+) · step (\d+): importance ([^<]+)</title>", heat)
    assert len(cells) == len(heads)
    want = {(h["layer"], h["head"], h["step"]): float(h["importance"]) for h in heads}
    for l, h, s, v in cells:
        assert float(v) == pytest.approx(want[(l, h, s)], rel=1e-3, abs=1e-12)


def test_gguf_and_sharded_checkpoints_of_a_run(tmp_path):
    """One-file GGUF checkpoints named by step (a llama.cpp conversion per save, Q8_0), and sharded
    model directories: each read as its format is, rows equal to analyze of that file."""
    gguf = pytest.importorskip("gguf")
    from test_gguf_rope import convert, hf_tensors
    r = tmp_path / "run"
    r.mkdir()
    rng = np.random.default_rng(0)
    base = hf_tensors(rng)
    for k, step in enumerate((10, 20)):
        t = {n: (v + 0.05 * k * rng.standard_normal(v.shape)).astype(np.float32) for n, v in base.items()}
        convert(t, str(r / f"llama-step{step}.gguf"), qtype=gguf.GGMLQuantizationType.Q8_0)
    watch(r, tmp_path / "w")
    assert [c["status"] for c in rows(tmp_path / "w" / "checkpoints.csv")] == ["analysed", "analysed"]
    run(["analyze", r / "llama-step20.gguf", "--out", tmp_path / "a", "--min-fit-size", "0", "--store",
         tmp_path / "o.sqlite"])
    mine = [{k: v for k, v in x.items() if k not in ("step", "model")} for x in rows(tmp_path / "w" / "metrics.csv")
            if x["step"] == "20"]
    assert mine == [{k: v for k, v in x.items() if k != "model"} for x in rows(tmp_path / "a" / "metrics.csv")]


def test_sharded_directories_and_no_heads(family_f32, tmp_path):
    r = tmp_path / "run"
    run(["generate", "--out", tmp_path / "fam", "--dtype", "F32", "--layers", "2", "--hidden", "128", "--heads", "4",
         "--intermediate", "256", "--vocab", "512", "--domain-heads", "1", "--generic-heads", "1", "--shard-mb", "0.2",
         "--models", "pretrained,math"])
    r.mkdir()
    shutil.copytree(tmp_path / "fam" / "pretrained", r / "global_step0")
    shutil.copytree(tmp_path / "fam" / "math", r / "global_step5")
    assert (r / "global_step5" / "model.safetensors.index.json").exists()
    watch(r, tmp_path / "w", "--no-heads")
    metrics = rows(tmp_path / "w" / "metrics.csv")
    assert {m["step"] for m in metrics} == {"0", "5"} and all(m["head"] == "" for m in metrics)


def test_python_follow_stops_on_keyboard_interrupt(family_f32, tmp_path):
    """diffract.watch(follow=True) in a process interrupted with SIGINT: KeyboardInterrupt, tables of every
    finished checkpoint written."""
    r = layout(family_f32, tmp_path / "run", ["step_0"])
    code = ("import sys, diffract_spectral as d\n"
            "try:\n    d.watch(sys.argv[1], out=sys.argv[2], store=sys.argv[3], follow=True, poll=0.2, settle=0,"
            " min_fit_size=0)\n"
            "except KeyboardInterrupt:\n    print('interrupted')\n")
    out = tmp_path / "w"
    p = subprocess.Popen([os.sys.executable, "-c", code, str(r), str(out), str(tmp_path / "s.sqlite")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: rows(out / "checkpoints.csv")[0]["status"] == "analysed")
        p.send_signal(signal.SIGINT)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert "interrupted" in stdout, stderr
    assert {x["step"] for x in rows(out / "metrics.csv")} == {"0"}


@pytest.mark.parametrize("keep_mtime", [False, True])
def test_follow_reads_a_resaved_step_again_once_it_settles(family_f32, tmp_path, keep_mtime):
    """A checkpoint re-saved while watched (a resumed run re-saving checkpoint-N): its rows become the new
    bytes' once they settle, also when the look falls inside --settle and when the re-save keeps the size
    and sets the old mtime back (the inode and ctime still tell)."""
    r = layout(family_f32, tmp_path / "run", ["step_0"])
    out = tmp_path / "w"
    p = subprocess.Popen([binary(), "watch", r, "--out", out, "--follow", "--poll", "0.1", "--settle", "0.6",
                          "--store", tmp_path / "s.sqlite", "--quiet"], stderr=subprocess.PIPE, text=True)
    try:
        def status(step):
            return {c["step"]: c for c in rows(out / "checkpoints.csv")}[step]
        wait_for(lambda: status("0")["status"] == "analysed")

        def frob():
            return {(x["tensor"], x["head"]): x["frob_norm"] for x in rows(out / "metrics.csv") if x["step"] == "0"}
        before = frob()
        f = r / "step_0" / "model.safetensors"
        old = f.stat()
        tmp = r / "step_0" / "model.tmp"
        tmp.write_bytes(perturbed_in_place(f.read_bytes(), scale=0.05, seed=3))  # same header, same size
        os.replace(tmp, f)
        if keep_mtime:
            os.utime(f, ns=(old.st_atime_ns, old.st_mtime_ns))
        time.sleep(0.3)  # the watcher looks while it settles
        wait_for(lambda: status("0")["status"] == "analysed" and frob() != before, timeout=30)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    # The rows are the re-saved bytes': equal to analyze of the checkpoint as it is now.
    run(["analyze", r / "step_0", "--out", tmp_path / "a", "--store", tmp_path / "s2.sqlite", "--quiet"])
    now = {(x["tensor"], x["head"]): x["frob_norm"] for x in rows(tmp_path / "a" / "metrics.csv")}
    got = {(x["tensor"], x["head"]): x["frob_norm"] for x in rows(out / "metrics.csv") if x["step"] == "0"}
    assert got == now
