import pytest

from fi_compat import config


def test_argument_beats_environment_beats_default():
    env = {"FI_COMPAT_CACHE_SIZE": "64"}
    assert config.resolve("cache_size", None, {}).value == config.DEFAULT_CACHE_SIZE
    assert config.resolve("cache_size", None, {}).source == "default"
    assert config.resolve("cache_size", None, env).value == 64
    assert config.resolve("cache_size", None, env).source == "environment"
    setting = config.resolve("cache_size", 8, env)
    assert (setting.value, setting.source) == (8, "argument")


@pytest.mark.parametrize("raw,expected", [("1", True), ("TRUE", True), ("yes", True), ("0", False), ("off", False)])
def test_boolean_environment_values(raw, expected):
    assert config.resolve("strict", None, {"FI_COMPAT_STRICT": raw}).value is expected


def test_blank_environment_value_means_unset():
    assert config.resolve("strict", None, {"FI_COMPAT_STRICT": "  "}).source == "default"


@pytest.mark.parametrize(
    "variable,raw,fragment",
    [
        ("FI_COMPAT_DISABLE", "maybe", "FI_COMPAT_DISABLE='maybe' is not a boolean; accepted: 0, 1, false"),
        ("FI_COMPAT_STRICT", "2", "FI_COMPAT_STRICT='2' is not a boolean"),
        ("FI_COMPAT_CACHE_SIZE", "lots", "FI_COMPAT_CACHE_SIZE='lots' is not an integer; accepted: an integer from 1"),
        ("FI_COMPAT_CACHE_SIZE", "0", "FI_COMPAT_CACHE_SIZE=0 is out of range; accepted: 1 to 1048576"),
        ("FI_COMPAT_CACHE_SIZE", "-5", "FI_COMPAT_CACHE_SIZE='-5' is not an integer; accepted: an integer from 1 to "
                                        "1048576, written with the digits 0-9 only (no sign"),
        ("FI_COMPAT_MAX_SEQ_LEN_POLICY", "round", "is not a max_seq_len policy; accepted: exact, bucket, capacity"),
    ],
)
def test_invalid_environment_names_variable_and_accepted_values(variable, raw, fragment):
    name = {v[0]: k for k, v in config._SPECS.items()}[variable]
    with pytest.raises(ValueError) as info:
        config.resolve(name, None, {variable: raw})
    assert fragment in str(info.value)


@pytest.mark.parametrize("value", [0, -1, 1.5, True, [8], 2**21])
def test_invalid_maxsize_argument(value):
    with pytest.raises(ValueError, match="cache_size"):
        config.resolve("cache_size", value, {})


@pytest.mark.parametrize("raw", ["\u0663", "1_000", "+5", "-0", "5.0", "1e3", "0x10", "\u00b2", "\uff15", "\u20035", ""])
def test_cache_size_accepts_ascii_digits_only(raw):
    """int() would take Arabic-Indic, fullwidth and superscript digits,
    underscores and a sign; the setting takes the digits 0-9 only."""
    with pytest.raises(ValueError) as info:
        config.check_cache_size(raw, "FI_COMPAT_CACHE_SIZE")
    assert f"FI_COMPAT_CACHE_SIZE={raw!r} is not an integer" in str(info.value)
    assert "digits 0-9 only" in str(info.value)


@pytest.mark.parametrize("raw,expected", [("5", 5), (" 5 ", 5), ("\t64\n", 64), ("007", 7), ("1048576", 1048576)])
def test_cache_size_strips_surrounding_ascii_whitespace(raw, expected):
    assert config.resolve("cache_size", None, {"FI_COMPAT_CACHE_SIZE": raw}).value == expected
    assert config.check_cache_size(raw, "maxsize") == expected  # install(maxsize="...") takes the same text


@pytest.mark.parametrize(
    "environ,arguments,fragments",
    [
        ({"FI_COMPAT_DISABLE": "1"}, {"strict": True},
         ["FI_COMPAT_DISABLE=1 (environment)", "strict=True (install() argument)"]),
        ({"FI_COMPAT_DISABLE": "yes", "FI_COMPAT_STRICT": "on"}, {},
         ["FI_COMPAT_DISABLE=1 (environment)", "FI_COMPAT_STRICT=1 (environment)"]),
    ],
)
def test_disable_with_strict_is_a_contradiction(environ, arguments, fragments):
    with pytest.raises(ValueError) as info:
        config.resolve_all(environ=environ, **arguments)
    for fragment in fragments:
        assert fragment in str(info.value)
    # either one alone is fine
    config.resolve_all(environ={}, strict=True)
    config.resolve_all(environ={"FI_COMPAT_DISABLE": "1"}, strict=False)


def test_install_refuses_disable_with_strict(monkeypatch):
    import fi_compat

    monkeypatch.setenv("FI_COMPAT_DISABLE", "1")
    with pytest.raises(ValueError, match="FI_COMPAT_DISABLE=1 .* contradicts strict=True"):
        fi_compat.install(strict=True)
    assert fi_compat.status()["state"] == "not-installed"


def test_install_validates_before_touching_anything(monkeypatch):
    import fi_compat

    monkeypatch.setenv("FI_COMPAT_CACHE_SIZE", "nope")
    with pytest.raises(ValueError, match="FI_COMPAT_CACHE_SIZE"):
        fi_compat.install()
    assert fi_compat.status()["state"] == "not-installed"


def test_disable_makes_install_a_no_op(monkeypatch, caplog):
    import fi_compat

    monkeypatch.setenv("FI_COMPAT_DISABLE", "1")
    with caplog.at_level("INFO", logger="fi_compat"):
        state = fi_compat.install()
    assert state["state"] == "disabled" and state["patched"] == []
    assert any("FI_COMPAT_DISABLE" in r.getMessage() for r in caplog.records if r.levelname == "INFO")


def test_status_state_is_a_phase_value_as_a_plain_string(monkeypatch):
    """``status()["state"]`` stays a plain ``str`` (JSON, repr, users' comparisons),
    one of :class:`fi_compat.installing.state.Phase`'s values, which are public: docs/doctor.md
    and users' code name them."""
    import fi_compat
    from fi_compat.installing.state import Phase

    assert [p.value for p in Phase] == ["not-installed", "pending", "installed", "unsupported", "disabled", "failed"]
    assert str(Phase.PENDING) == f"{Phase.PENDING}" == "pending"
    assert fi_compat.status()["state"] == Phase.NOT_INSTALLED
    monkeypatch.setenv("FI_COMPAT_DISABLE", "1")
    state = fi_compat.install()["state"]
    assert type(state) is str and state == Phase.DISABLED


def test_library_adds_no_logging_handlers():
    import logging

    import fi_compat.installing.installer  # noqa: F401

    assert logging.getLogger("fi_compat").handlers == []
