"""The committed method table and configuration reference are what the code declares."""

from paper import reference
from ripple_flwr.methods.registry import METHODS, all_options
from ripple_flwr.settings import RunSettings


def test_committed_pages_equal_what_the_registry_generates():
    assert reference.stale_pages() == [], "run: python -m paper.reference"


def test_every_method_and_every_key_has_its_row():
    methods = reference.method_table()
    for name in METHODS:
        assert f"| `{name}` |" in methods
    options = reference.options_table()
    for opt in (*RunSettings.fields_as_options(), *all_options()):
        assert f"| `{opt.key}` |" in options


def test_a_stale_page_is_found(tmp_path):
    for page in reference.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((reference.ROOT / page).read_text())
    page = tmp_path / "docs/configuration.md"
    page.write_text(page.read_text().replace("| `lr` |", "| `learning-rate` |"))
    assert reference.stale_pages(tmp_path) == ["docs/configuration.md"]


def test_every_pretrain_bound_has_its_row():
    from ripple_flwr.cli.pretrain import build_parser
    from ripple_flwr.cli.pretrain_bounds import BOUNDS, flag_names

    table, flags = reference.pretrain_options_table(), flag_names(build_parser())
    for dest, bound in BOUNDS.items():
        assert f"| `{flags[dest]}` |" in table and bound.text() in table, dest


def _copy_pages(tmp_path):
    for page in reference.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / page).write_text((reference.ROOT / page).read_text())


def test_an_edited_number_in_a_results_block_is_found(tmp_path):
    """The drift check can fail: one number changed in a copy of each page is caught."""
    already = set(reference.stale_pages())
    for page, number in (("README.md", "92.4 ± 0.2"), ("docs/results.md", "61.6 ± 17.6")):
        _copy_pages(tmp_path)
        text = (tmp_path / page).read_text()
        assert number in text
        (tmp_path / page).write_text(text.replace(number, "99.9 ± 0.1", 1))
        assert set(reference.stale_pages(tmp_path)) - already == {page}


def test_generated_cells_equal_the_committed_table_markdown():
    """The generator formats every Table 1/2 cell as the tables' own Markdown does."""
    from paper import evidence as ev

    for name in ("table1_fashion_300rounds_3seeds", "table1_rotated_fashion_100rounds_seed42"):
        md = (ev.RESULTS / f"{name}.md").read_text()
        for row, stats in ev.load(f"{name}.json")["rows"].items():
            line = next(x for x in md.splitlines() if x.startswith(f"| {row} |"))
            assert f"| {ev.cell(stats['final_accuracy'])} |" in line, row
    md = (ev.RESULTS / "table2_fashion_100rounds_3seeds.md").read_text()
    for method, cells in ev.load("table2_fashion_100rounds_3seeds.json")["cells"].items():
        line = next(x for x in md.splitlines() if x.startswith(f"| {method} |"))
        for cell in cells.values():
            assert f"| {ev.cell(cell['zero_shot_accuracy'])}" in line, method


def test_recovered_cells_are_marked_and_oracles_not_ranked():
    from paper import evidence as ev
    from paper import evidence_table1

    rec = ev.recovered("table1-fashion-mnist", 300)
    assert sum(map(len, rec.values())) == 14
    table = evidence_table1.full_table()
    for row in rec:
        line = next(x for x in table.splitlines() if x.startswith(f"| {ev.label(row)} |"))
        assert "recovered from the table" in line
    stats = {"oracle": {"mean": 0.99}, "a": {"mean": 0.5}, "b": {"mean": 0.5}, "c": {"mean": 0.4}}
    assert ev.ranks(stats) == {"a": 1, "b": 1, "c": 2}


def test_a_changed_benchmark_number_changes_its_page(tmp_path, monkeypatch):
    """docs/benchmarks.md follows its results file: a changed ratio flips the target's verdict."""
    import json
    import shutil

    from paper import evidence as ev

    shutil.copytree(ev.RESULTS, tmp_path / "results")
    peer = tmp_path / "results" / "peer_pfllib.json"
    peer.write_text(
        json.dumps({**json.loads(peer.read_text()), "peer_train_round_ratio_vs_pfllib": 0.91})
    )
    monkeypatch.setattr(ev, "RESULTS", tmp_path / "results")
    page = reference.ROOT / "docs/benchmarks.md"
    text = reference.render(page.read_text(), reference.PAGES["docs/benchmarks.md"])
    assert "**0.91x PFLlib's training round** (target 0.8x: missed)" in text
    assert text != page.read_text()


def test_history_blocks_read_only_committed_files_and_follow_them(tmp_path, monkeypatch):
    """results.md's earlier-protocol blocks: git's copy of docs/results/ alone gives the
    committed page, and one number changed in a source file changes the page."""
    import shutil
    import subprocess

    import pytest

    from paper import evidence as ev

    listed = subprocess.run(
        ["git", "ls-files", "docs/results"], cwd=reference.ROOT, capture_output=True, text=True
    )
    if listed.returncode != 0 or not listed.stdout.strip():
        pytest.skip("not a git checkout: cannot tell committed files")
    for rel in listed.stdout.split():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(reference.ROOT / rel, tmp_path / rel)
    names = tuple(n for n in reference.PAGES["docs/results.md"] if n.startswith("history-"))
    assert len(names) > 20
    page = (reference.ROOT / "docs/results.md").read_text()

    def rendered():
        ev.load.cache_clear()
        ev.summaries.cache_clear()
        return reference.render(page, names)

    monkeypatch.setattr(ev, "RESULTS", tmp_path / "docs" / "results")
    try:
        assert rendered() == page
        source = tmp_path / "docs/results/accuracy_fashion_300rounds_flower_seed0.json"
        text = source.read_text()
        assert text.count('"final_accuracy": 0.8375833333333333') == 1  # FedYogi's
        source.write_text(text.replace("0.8375833333333333", "0.9375833333333333"))
        changed = rendered()
        assert "| FedYogi | 56.0 | 58.6 | 73.7 | 79.3 | 84.9 | 93.8 |" in changed
        assert "FedYogi, FedAdagrad end 10.3-23.9 points above FedAvg" in changed
    finally:
        ev.load.cache_clear()
        ev.summaries.cache_clear()


def test_the_map_advice_names_the_leader_and_says_when_the_seeds_do_not_agree():
    from paper.evidence_map import _verdict

    def stat(mean, sigma=None):
        return {"final_accuracy": {"mean": mean, "sigma": sigma, "n": 3}}

    rows = {"ripple-strat": stat(0.80, 0.01), "fedyogi": stat(0.85, 0.01)}
    seeds = {"42": -0.05, "7": -0.04, "123": -0.06}
    loss = {"best_other": "fedyogi", "mean": -0.05, "sigma": 0.01, "n": 3, "per_seed": seeds}
    text = _verdict(rows, loss, "final_accuracy")
    assert text.startswith("training clients: FedYogi 85.0") and "over Ripple-Strat" in text
    assert text.endswith(": a lead)")  # paired t 95% interval excludes 0
    noisy = {"42": -0.10, "7": 0.03, "123": -0.08}
    unsure = _verdict(rows, {**loss, "sigma": 0.07, "per_seed": noisy}, "final_accuracy")
    assert unsure.endswith(": no clear winner)")
    win = _verdict(rows, {**loss, "mean": 0.05}, "final_accuracy")
    assert win.startswith("training clients: Ripple-Strat 80.0") and "over FedYogi" in win
    one = _verdict(
        rows, {**loss, "n": 1, "sigma": None, "per_seed": {"42": -0.05}}, "final_accuracy"
    )
    assert "(seed 42 only: no interval)" in one


def test_the_300_round_check_flags_a_margin_whose_sign_changes():
    from paper.evidence_map300 import _cell_verdict

    def row(train, zero_shot):
        return {
            "final_accuracy": {"per_seed": {"42": train[0], "7": train[1]}},
            "zero_shot_accuracy": {"per_seed": {"42": zero_shot, "7": zero_shot}},
        }

    at100 = {
        "ripple-strat": row((0.80, 0.82), 0.85),
        "fedyogi": row((0.78, 0.80), 0.90),
        "local": row((0.5, 0.5), None),
    }
    at300 = {"ripple-strat": row((0.82, 0.84), 0.86), "fedyogi": row((0.84, 0.86), 0.80)}
    rerun = ["ripple-strat", "fedyogi"]
    v = _cell_verdict(rerun, at100, at300, ["42", "7"])
    train, zs = v["final_accuracy"], v["zero_shot_accuracy"]
    # Two seeds with the same gap at both: no interval and no verdict (issue 62's rule; it
    # used to read "+2.0 ± 0.0 ... leads").
    assert train["text"] == "+2.0 vs FedYogi: too few seeds / -2.0 vs FedYogi: too few seeds"
    assert train["kept"] is False and zs["kept"] is False
    assert train["left"] == ("local", 31.0) and zs["left"] is None  # the method not rerun
    one_seed = _cell_verdict(rerun, at100, at300, ["42"])
    assert (
        one_seed["final_accuracy"]["text"]
        == "+2.0 vs FedYogi: too few seeds / -2.0 vs FedYogi: too few seeds"
    )
    same = _cell_verdict(rerun, at100, {**at300, "fedyogi": row((0.7, 0.7), 0.9)}, ["42", "7"])
    assert same["final_accuracy"]["kept"] is True
