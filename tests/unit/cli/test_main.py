"""The ``joulestat`` command line: a line that names its command imports that command's
module alone (every command starts sooner); one that names none lists them all."""

from __future__ import annotations

import importlib

import pytest

from joulestat.cli import main as cli_main


@pytest.fixture
def imported(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command modules ``build_parser`` imports, in order."""
    seen: list[str] = []
    import_module = importlib.import_module

    def recording(name: str) -> object:
        seen.append(name.removeprefix("joulestat.cli."))
        return import_module(name)

    monkeypatch.setattr(cli_main.importlib, "import_module", recording)
    return seen


@pytest.mark.parametrize(("argv", "module"), [(["compare", "--json"], "compare"),
                                              (["import", "x.json"], "import_"),
                                              (["agent"], "agent")])
def test_a_named_command_imports_its_module_alone(imported: list[str], argv: list[str],
                                                  module: str) -> None:
    args = cli_main.build_parser(argv).parse_args(argv)
    assert imported == [module]
    assert args.command == argv[0] and callable(args.func)


def test_a_line_naming_no_command_lists_them_all(imported: list[str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["--help"], ["nope"], ["import_"]):
        imported.clear()
        with pytest.raises(SystemExit):
            cli_main.build_parser(argv).parse_args(argv)
        assert imported == list(cli_main.COMMANDS)
        shown = capsys.readouterr()
        for command in cli_main.COMMANDS:
            assert command.rstrip("_") in shown.out + shown.err
