"""Settings: ~/.pinch/config.toml overridden by PINCH_* variables; PINCH_HOME moves everything."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.config import ConfigError, load_settings
from memory.memory_config import MemoryConfig


def write_config(home: Path, text: str) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(text, encoding="utf-8")


def test_pinch_home_relocates_config_workspace_and_database(pinch_home: Path) -> None:
    settings = load_settings()

    assert settings.home == pinch_home
    assert settings.config_path == pinch_home / "config.toml"
    assert settings.workspace_dir == pinch_home / "workspace"
    assert settings.database_path == pinch_home / "agents" / "main" / "agent.sqlite"


def test_defaults_without_a_config_file(pinch_home: Path) -> None:
    settings = load_settings()

    assert settings.agent_id == "main"
    assert settings.memory == MemoryConfig()
    assert settings.memory.embedding.provider == "local"  # offline semantic search by default
    assert (settings.memory.chunking.tokens, settings.memory.chunking.overlap) == (400, 80)
    assert not pinch_home.exists()  # reading settings creates nothing


def test_values_come_from_the_toml_file(pinch_home: Path) -> None:
    write_config(
        pinch_home,
        'agent_id = "work"\n[memory]\npreset = "keyword"\nextra_paths = ["~/notes"]\n'
        '[memory.embedding]\nprovider = "use"\n',
    )

    settings = load_settings()

    assert settings.agent_id == "work"
    assert settings.memory.preset == "keyword"
    assert settings.memory.extra_paths == ["~/notes"]
    assert settings.memory.embedding.provider == "use"
    assert settings.database_path == pinch_home / "agents" / "work" / "agent.sqlite"


def test_environment_overrides_the_toml_file(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(pinch_home, 'agent_id = "work"\n[memory]\npreset = "keyword"\n')
    monkeypatch.setenv("PINCH_AGENT_ID", "home")
    monkeypatch.setenv("PINCH_MEMORY__PRESET", "openclaw")

    settings = load_settings()

    assert (settings.agent_id, settings.memory.preset) == ("home", "openclaw")


def test_nested_environment_variables_merge_with_the_file(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(pinch_home, '[memory]\npreset = "keyword"\n[memory.embedding]\nbatch_size = 8\n')
    monkeypatch.setenv("PINCH_MEMORY__EMBEDDING__PROVIDER", "none")
    monkeypatch.setenv("PINCH_MEMORY__CHUNKING__TOKENS", "200")

    memory = load_settings().memory

    assert memory.embedding.provider == "none"
    assert memory.embedding.batch_size == 8  # from the file, beside the env value
    assert memory.chunking.tokens == 200
    assert memory.preset == "keyword"


def test_an_explicit_workspace_is_used(pinch_home: Path, tmp_path: Path) -> None:
    write_config(pinch_home, f'workspace = "{tmp_path / "elsewhere"}"\n')

    assert load_settings().workspace_dir == tmp_path / "elsewhere"


def test_a_workspace_with_a_tilde_is_expanded(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("PINCH_WORKSPACE", "~/notes")

    assert load_settings().workspace_dir == tmp_path / "notes"


@pytest.mark.parametrize("agent_id", ["../evil", "a/b", "", "-dash-first", "x" * 65, "ümlaut"])
def test_agent_id_must_be_a_safe_folder_name(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch, agent_id: str
) -> None:
    monkeypatch.setenv("PINCH_AGENT_ID", agent_id)

    with pytest.raises(ConfigError, match=r"agent_id: .*letters, digits.*PINCH_AGENT_ID"):
        load_settings()


@pytest.mark.parametrize("agent_id", ["main", "work-2", "Bot_1"])
def test_agent_id_accepts_letters_digits_dash_underscore(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch, agent_id: str
) -> None:
    monkeypatch.setenv("PINCH_AGENT_ID", agent_id)

    assert load_settings().agent_id == agent_id


def test_an_unknown_preset_names_the_setting_and_the_choices(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__PRESET", "nope")

    with pytest.raises(ConfigError) as err:
        load_settings()

    assert "memory.preset" in str(err.value)
    assert "PINCH_MEMORY__PRESET" in str(err.value)
    assert "keyword, openclaw, pinch, vector" in str(err.value)


def test_a_bad_number_names_the_setting(pinch_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINCH_MEMORY__WATCH_DEBOUNCE_MS", "soon")

    with pytest.raises(ConfigError, match=r"memory\.watch_debounce_ms: .*integer"):
        load_settings()


def test_an_out_of_range_value_names_the_setting(pinch_home: Path) -> None:
    write_config(pinch_home, "[memory.chunking]\ntokens = 4\n")

    with pytest.raises(ConfigError, match=r"memory\.chunking\.tokens: .*greater than or equal"):
        load_settings()


def test_an_unknown_key_in_the_file_is_an_error(pinch_home: Path) -> None:
    write_config(pinch_home, "[memory]\nprest = 'keyword'\n")

    with pytest.raises(ConfigError, match=r"memory\.prest"):
        load_settings()


def test_invalid_toml_is_an_error_naming_the_file(pinch_home: Path) -> None:
    write_config(pinch_home, "[memory\n")

    with pytest.raises(ConfigError, match=r"config\.toml is not valid TOML.*move it aside"):
        load_settings()


def test_the_written_config_template_is_valid_and_all_defaults(pinch_home: Path) -> None:
    from app.cli.setup import CONFIG_TEMPLATE

    write_config(pinch_home, CONFIG_TEMPLATE)

    assert load_settings().memory == MemoryConfig()


def test_a_file_another_process_created_first_is_left_as_it_is(pinch_home: Path) -> None:
    # Several `pinch gateway` processes starting at once on one home each initialise it: the
    # one that finds a template file made between its check and its create must not crash.
    from app.cli.setup import _write_private

    pinch_home.mkdir(parents=True, exist_ok=True)
    target = pinch_home / "AGENTS.md"
    target.write_text("made by the other gateway")

    assert _write_private(target, b"template") is False
    assert target.read_text() == "made by the other gateway"


def test_gateways_initialising_one_home_at_once_all_start(pinch_home: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from app.cli.setup import initialise
    from app.cli.support import TEMPLATE_DIR

    settings = load_settings()
    with ThreadPoolExecutor(max_workers=6) as pool:
        made = list(pool.map(lambda _: initialise(settings, TEMPLATE_DIR), range(6)))

    templates = {p.name for p in TEMPLATE_DIR.glob("*.md")}
    assert {p.name for p in settings.workspace_dir.glob("*.md")} >= templates
    created = [Path(line).name for lines in made for line in lines if line.endswith(".md")]
    assert sorted(created) == sorted(templates)  # each file made once, by one of them


# ---- mistakes that used to end in a traceback or pass unnoticed ----------------------------


def test_a_config_file_that_is_a_folder_is_one_clear_error(pinch_home: Path) -> None:
    (pinch_home / "config.toml").mkdir(parents=True)
    with pytest.raises(ConfigError, match="is a folder, not a file"):
        load_settings()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_config_file_is_one_clear_error(pinch_home: Path) -> None:
    write_config(pinch_home, "")
    (pinch_home / "config.toml").chmod(0)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_settings()


def test_a_pinch_home_that_is_a_file_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home-file"
    home.write_text("not a folder")
    monkeypatch.setenv("PINCH_HOME", str(home))
    with pytest.raises(ConfigError, match="is a file, not a folder"):
        load_settings()


def test_a_list_from_the_environment_that_is_not_json_shows_the_expected_form(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", "notes")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "PINCH_MEMORY__EXTRA_PATHS" in str(err.value)
    assert """PINCH_MEMORY__EXTRA_PATHS='["notes"]'""" in str(err.value)


def test_a_list_of_ids_from_the_environment_without_brackets_shows_the_expected_form(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", "111")  # valid JSON, but a number
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert """PINCH_OWNERS__TELEGRAM='["111"]'""" in str(err.value)


def test_a_list_from_the_environment_as_a_json_string_shows_the_plain_list(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", '"notes"')  # JSON, but a string
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert """PINCH_MEMORY__EXTRA_PATHS='["notes"]'""" in str(err.value)


def test_a_bad_json_list_from_the_environment_is_named_as_from_there_and_shown_once(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(pinch_home, "[memory]\npreset = 'keyword'\n")
    monkeypatch.setenv("PINCH_OWNERS__TELEGRAM", '["@owner"]')
    with pytest.raises(ConfigError) as err:
        load_settings()
    advice = str(err.value)
    assert "the environment variable PINCH_OWNERS__TELEGRAM" in advice
    assert "config.toml" not in advice
    assert '\\"' not in advice and '["[' not in advice  # the value is not wrapped again
    assert advice.count("@owner") == 1


def test_a_bad_value_in_the_file_names_the_file_not_the_environment(pinch_home: Path) -> None:
    write_config(pinch_home, "[owners]\ntelegram = ['@owner']\n")
    with pytest.raises(ConfigError) as err:
        load_settings()
    advice = str(err.value)
    assert f"set in {pinch_home / 'config.toml'}" in advice
    assert "PINCH_OWNERS__TELEGRAM" not in advice


def test_a_whole_table_set_from_the_environment_names_the_variable(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY", "x")
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert "PINCH_MEMORY='x'" in str(err.value)
    assert "is a table" in str(err.value)
    assert "PINCH_MEMORY__EXTRA_PATHS=" in str(err.value)


def test_a_list_from_the_environment_in_json_is_accepted(
    pinch_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PINCH_MEMORY__EXTRA_PATHS", '["notes"]')
    assert load_settings().memory.extra_paths == ["notes"]


def test_an_unknown_time_zone_is_refused_at_load(pinch_home: Path) -> None:
    write_config(pinch_home, '[agent]\ntimezone = "Mars/Olympus_Mons"\n')
    with pytest.raises(ConfigError, match='Unknown time zone "Mars/Olympus_Mons"'):
        load_settings()


def test_a_known_time_zone_is_accepted(pinch_home: Path) -> None:
    write_config(pinch_home, '[agent]\ntimezone = "Europe/Berlin"\n')
    assert load_settings().agent.timezone == "Europe/Berlin"


def test_a_context_window_smaller_than_the_reserve_is_refused_with_the_numbers(
    pinch_home: Path,
) -> None:
    write_config(pinch_home, "[agent]\ncontext_window = 20000\n")
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert "context_window = 20,000" in message
    assert "reserve_floor (20,000)" in message and "soft_threshold (4,000)" in message
    assert "at least 26,000" in message


def test_a_small_window_with_a_matching_reserve_is_accepted(pinch_home: Path) -> None:
    write_config(
        pinch_home, "[agent]\ncontext_window = 8000\nreserve_floor = 2000\nsoft_threshold = 1000\n"
    )
    assert load_settings().agent.context_window == 8000


def test_an_api_key_in_the_file_is_refused_as_a_secret_naming_the_environment(
    pinch_home: Path,
) -> None:
    write_config(pinch_home, '[agent]\napi_key = "sk-ant-api03-abcdefghijklmnop"\n')
    with pytest.raises(ConfigError) as err:
        load_settings()
    message = str(err.value)
    assert "[agent] api_key" in message and "ANTHROPIC_API_KEY" in message
    assert "sk-ant-api03" not in message
