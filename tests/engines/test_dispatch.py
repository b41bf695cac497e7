"""The dispatcher's table look-up and the bench tables, on measured-looking data (CPU), and
`ebsdxc bench` end to end on the GPU."""

import json
import subprocess
import sys

import pytest

from ebsdxc import bench
from ebsdxc.engines import dispatch
from ebsdxc.engines.definition import KernelChoice, parse_kernel
from ebsdxc.engines.dispatch import CalibrationTable, Case, Choice


def _table(tmp_path):
    rows = []
    small = Case("one_to_many", 1, 32, 16, 16)
    big = Case("one_to_many", 1, 32, 256, 256)
    for case, times in ((small, {"fft": 0.02, "direct/multi_matrix_right:kr=8": 0.006}),
                        (big, {"fft": 0.1, "direct/grouped_overlap:g=4,kr=4": 20.0})):
        for label, ms in times.items():
            rows.append(CalibrationTable.row(case, Choice.from_label(label), ms))
    t = CalibrationTable("Test GPU", rows, {})
    path = tmp_path / "t.json"
    t.save(path)
    return CalibrationTable.load(path)


def test_nearest_measured_cell_decides(tmp_path):
    t = _table(tmp_path)
    assert t.best(Case("one_to_many", 1, 30, 20, 20)).label == "direct/multi_matrix_right:kr=8"
    assert t.best(Case("one_to_many", 1, 40, 200, 200)).engine == "fft"
    # Restricted to the direct engine, the big cell's direct winner comes back.
    assert t.best(Case("one_to_many", 1, 40, 200, 200), engines=("direct",)).kernel.g == 4
    # Other forms or modes have no cell here.
    assert t.best(Case("n_to_m", 4, 4, 16, 16)) is None
    assert t.best(Case("one_to_many", 1, 32, 16, 16, "window", 3)) is None


def test_winner_that_does_not_apply_is_passed_over(tmp_path):
    rows = [CalibrationTable.row(Case("n_to_m", 8, 8, 32, 32), Choice.from_label(lbl), ms)
            for lbl, ms in (("direct/multi_matrix_both:kl=4,kr=4", 1.0), ("direct/warp_shuffle", 2.0))]
    t = CalibrationTable("x", rows, {})
    # n-to-mn cannot use several lefts per thread; same form only, so nothing here.
    assert t.best(Case("n_to_mn", 8, 8, 32, 32)) is None
    assert t.best(Case("n_to_m", 8, 8, 32, 32)).kernel.kl == 4


def test_schema_is_checked(tmp_path):
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({"schema": 99, "gpu": "x", "rows": []}))
    with pytest.raises(ValueError, match="schema"):
        CalibrationTable.load(p)


def test_user_calibration_takes_precedence(tmp_path, monkeypatch):
    monkeypatch.setenv("EBSDXC_CACHE_DIR", str(tmp_path))
    dispatch.load_table.cache_clear()
    dispatch._choose.cache_clear()
    path = dispatch.cache_path("Test GPU 9000")
    assert path == tmp_path / "calibration" / "test-gpu-9000.json"
    _table(tmp_path).save(path)
    c = dispatch.choose(Case("one_to_many", 1, 32, 16, 16), gpu="Test GPU 9000")
    assert c.label == "direct/multi_matrix_right:kr=8"
    dispatch.load_table.cache_clear()
    dispatch._choose.cache_clear()


def test_shipped_table_serves_other_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("EBSDXC_CACHE_DIR", str(tmp_path))
    dispatch.load_table.cache_clear()
    t = dispatch.load_table("Some Future GPU")
    if not dispatch._shipped():
        pytest.skip("no shipped table")
    assert t is not None and t.rows
    dispatch.load_table.cache_clear()


def test_fallback_without_table():
    c = dispatch.fallback(Case("n_to_mn", 86, 50, 96, 96, "window", 8), engines=("direct",))
    assert c.engine == "direct" and c.kernel.fits(Case("n_to_mn", 86, 50, 96, 96, "window", 8).pairing)
    assert dispatch.fallback(Case("one_to_one", 1, 1, 256, 256), engines=("fft", "direct")).engine == "fft"
    with pytest.raises(ValueError, match="no engine"):
        dispatch.fallback(Case("n_to_m", 2, 2, 8, 8), engines=("fused",))


def test_candidates_are_valid_and_cover_the_family():
    for case in bench.table1_cases((16, 128)) + bench.calibration_cases(quick=True):
        cands = bench.candidates(case)
        assert cands[0].engine == "fft"
        for c in cands:
            assert dispatch.applies(c, case) or c.engine == "fused"
        algs = {c.kernel.algorithm for c in cands if c.kernel}
        assert {"overlap_wise", "warp_shuffle"} <= algs
        if case.form == "n_to_m" and case.n_left >= 2:
            assert "multi_matrix_both" in algs


def _measurements():
    out = []
    for s, (fft, k, t) in {16: (0.02, "multi_matrix_right:kr=8", 0.005),
                           64: (0.03, "grouped_overlap:g=4,kr=8", 0.2)}.items():
        case = Case("one_to_many", 1, 32, s, s)
        out.append(bench.Measurement(case, Choice("fft"), fft))
        out.append(bench.Measurement(case, Choice("direct", parse_kernel(k)), t))
        out.append(bench.Measurement(case, Choice("direct", KernelChoice("overlap_wise")), None, "skipped"))
    return out


def test_csv_round_trip_and_table1(tmp_path):
    ms = _measurements()
    p = tmp_path / "b.csv"
    bench.write_csv(ms, p)
    back = bench.read_csv(p)
    assert [(m.case, m.choice, m.ms) for m in back] == [(m.case, m.choice, m.ms) for m in ms]
    md = bench.table1_markdown(back)
    assert "| 1-32 | multi_matrix_right:kr=8 0.005 ms (fft 0.02) | fft 0.03 ms |" in md
    win = bench.winners(back)
    assert win[Case("one_to_many", 1, 32, 64, 64)][1].ms == 0.2
    # 32 maps of 31x31 lags: the overlaps sum to 256 * 256 products per map.
    m = back[0]
    assert m.tflops == pytest.approx(2 * 32 * 256 ** 2 / (0.02e-3) / 1e12)


def test_bench_from_csv_without_gpu(tmp_path):
    p = tmp_path / "b.csv"
    bench.write_csv(_measurements(), p)
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--from-csv", str(p)], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    assert "multi_matrix_right:kr=8" in r.stdout
    png = tmp_path / "b.png"
    assert png.read_bytes()[:4] == b"\x89PNG"
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--from-csv", str(p)], capture_output=True,
                       text=True)
    assert r.returncode == 2 and "b.png: exists; pass --overwrite" in r.stderr
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--from-csv", str(tmp_path / "no.csv")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no.csv" in r.stderr and r.stderr.count("\n") == 1


def test_bench_bad_options(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--sizes", "16,x"], capture_output=True, text=True)
    assert r.returncode == 2 and "--sizes" in r.stderr
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--missing"], capture_output=True, text=True)
    assert r.returncode == 2 and "--missing" in r.stderr and "--calibrate" in r.stderr
    assert r.stderr.count("\n") == 1


def test_missing_cases_extend_a_table(tmp_path):
    table = _table(tmp_path)  # cells: 1-32 at 16x16 and at 256x256
    ms = _measurements()  # cells: 1-32 at 16x16 and at 64x64
    wanted = sorted({m.case for m in ms}, key=lambda c: c.h)
    missing = bench.missing_cases(wanted, table)
    assert [c.h for c in missing] == [64]
    assert bench.missing_cases(wanted, None) == wanted
    new = [m for m in ms if m.case in missing]
    ext = bench.extended_table(table, new, {"command": "ebsdxc bench --calibrate --missing"})
    path = tmp_path / "ext.json"
    ext.save(path)
    ext = CalibrationTable.load(path)
    assert ext.gpu == table.gpu
    assert {c.h for c in ext.cells()} == {16, 64, 256}
    assert ext.rows[:len(table.rows)] == table.rows  # what was measured stays as it was
    assert len(ext.rows) == len(table.rows) + sum(m.ms is not None for m in new)
    (added,) = ext.meta["added"]
    assert added["command"] == "ebsdxc bench --calibrate --missing" and added["cases"] == 1 and "created" in added
    assert bench.missing_cases(wanted, ext) == []
    # the new cell now decides for the cases nearest it
    assert ext.best(Case("one_to_many", 1, 32, 64, 64)).label == "fft"


@pytest.mark.gpu
def test_bench_quick_on_gpu(tmp_path):
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "bench", "--sizes", "16,32", "--out", str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    csvs = list(tmp_path.glob("*.csv"))
    assert len(csvs) == 1
    ms = bench.read_csv(csvs[0])
    win = bench.winners(ms)
    assert len(win) == 2 * len(bench.TABLE1_FORMS)
    assert all(b.ms > 0 for b, _, _ in win.values())


def test_process_refuses_unknown_kernel(tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "sample_data"
    out = tmp_path / "o.h5"
    r = subprocess.run([sys.executable, "-m", "ebsdxc", "process", str(root / "scan.h5"), "--ref",
                        str(root / "ref.tif"), "-o", str(out), "--engine", "direct", "--kernel", "bogus:kr=2"],
                       capture_output=True, text=True)
    assert r.returncode == 2
    assert "--kernel: unknown definition-based kernel 'bogus'" in r.stderr and r.stderr.count("\n") == 1
    assert not out.exists()
