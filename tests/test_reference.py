"""The committed method table and configuration reference are what the code declares."""

from ripple_flwr.app.registry import METHODS, all_options
from ripple_flwr.cli import reference
from ripple_flwr.settings import RunSettings


def test_committed_pages_equal_what_the_registry_generates():
    assert reference.stale_pages() == [], "run: python -m ripple_flwr.cli.reference"


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
